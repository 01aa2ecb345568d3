// dask_caps._core: the dask-caps core for Python (pybind11), as thin as
// cli/. Each function converts its arguments, lets go of the GIL, calls one
// core function (the same one the command calls) and converts the result:
//
//   probe()       probe_host + probe_to_json           (`probe --json`)
//   negotiate()   negotiate (core/caps/negotiate.h)    (`check`'s pair object)
//   compress()    compress_into (core/wire/codec.h)    (Dask's frame formats)
//   decompress()  decompress_into
//   recode()      check_frames + recode_message (core/recode/engine.h) (`transcode`, per message)
//   inspect()     inspect_message_json (core/recode/describe.h) (`inspect --json`)
//   LinkChooser   the codec per connection (core/caps/link_choice.h; python/src/link_chooser.h)
//   read_capabilities(), read_peer(), capabilities()
//                 the "capabilities" key (core/wire/handshake.h; python/src/capabilities.h)
//
// Buffers come in through the buffer protocol without a copy (PyBUF_SIMPLE:
// any C-contiguous bytes-like object) and stay exported while the core
// works on them without the GIL. Output of the codecs is written straight
// into the bytes object returned (python/src/buffers.h). Core errors become
// dask_caps.Error (python/src/errors.h). Nothing here executes a pickle.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daskcaps/base/limits.h"
#include "daskcaps/caps/negotiate.h"
#include "daskcaps/caps/probe.h"
#include "daskcaps/recode/describe.h"
#include "daskcaps/recode/engine.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"
#include "python/src/capabilities.h"
#include "python/src/delivery.h"
#include "python/src/release.h"
#include "daskcaps/wire/frames.h"
#include "python/src/buffers.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/limits.h"
#include "python/src/link_chooser.h"

namespace py = pybind11;

namespace daskcaps::python {

namespace {

// ---- arguments ----------------------------------------------------------

// "lz4, snappy, zstd, zlib": the codecs of this build, for messages.
std::string codec_names() {
  std::string out;
  for (Codec c : kAllCodecs) out += (out.empty() ? "" : ", ") + std::string(codec_name(c));
  return out;
}

// A codec as Dask names it in compressions[...]: a name, or None/False for
// raw frames.
Codec codec_argument(const py::handle& value, const char* what) {
  if (value.is_none() || (PyBool_Check(value.ptr()) && !value.cast<bool>())) return Codec::none;
  if (!py::isinstance<py::str>(value))
    throw py::type_error(std::string(what) + ": a codec name (str) or None, not " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
  const std::string name = value.cast<std::string>();
  auto c = codec_from_name(name);
  if (!c) raise(make_error(Errc::unknown_codec, std::string(what) + " " + name + ": not a codec this build has (" +
                                                    codec_names() + ")"));
  return *c;
}

// recode()'s codec: None or "keep" keep every frame's codec.
std::optional<Codec> target_codec(const py::handle& value) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(value) && value.cast<std::string>() == "keep") return std::nullopt;
  return codec_argument(value, "codec");
}

std::optional<int> target_protocol(const py::handle& value) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(value) && value.cast<std::string>() == "keep") return std::nullopt;
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
    throw py::type_error("pickle_protocol: an int from 0 to 5, \"keep\" or None");
  // The range is the core's (validate(TranscodeOptions)); a value past int stays past it.
  const long long p = value.cast<long long>();
  return static_cast<int>(std::clamp<long long>(p, -1, 6));
}

bool target_layout_cpu(const py::handle& value) {
  if (value.is_none()) return false;
  if (!py::isinstance<py::str>(value)) throw py::type_error("layout: \"keep\", \"cpu\" or None");
  const std::string l = value.cast<std::string>();
  if (l == "keep") return false;
  if (l == "cpu") return true;
  raise(make_error(Errc::usage, "layout " + l + ": use \"keep\" or \"cpu\""));
}

// ---- the functions ------------------------------------------------------

py::object probe(const py::object& python, double timeout) {
  ProbeOptions options;
  if (python.is_none()) {
    // The running interpreter, as `probe` takes the first candidate that
    // imports distributed: without it, "python" is null and
    // "python-error" says why.
    const std::string self = py::module_::import("sys").attr("executable").cast<std::string>();
    if (!self.empty()) options.python_candidates = {self};
  } else if (PyBool_Check(python.ptr())) {
    if (python.cast<bool>()) throw py::type_error("python: an interpreter (str or path), None or False");
    options.python_mode = ProbeOptions::PythonMode::none;
  } else {
    options.python_mode = ProbeOptions::PythonMode::named;
    options.python_executable = py::str(py::module_::import("os").attr("fsdecode")(python));
  }
  if (!(timeout > 0)) raise(make_error(Errc::usage, "timeout must be positive"));
  options.python_timeout = std::chrono::milliseconds(static_cast<long long>(timeout * 1000));
  Result<HostProbe> result = [&] {
    py::gil_scoped_release nogil;
    return probe_host(options);
  }();
  if (!result) raise(std::move(result).error());
  return json_text_to_python(probe_to_json_text(*result));
}

NegotiateSide side_argument(const py::handle& doc, std::string name, std::optional<std::string> role,
                            const py::handle& capabilities, const std::string& what) {
  NegotiateSide side;
  side.document = to_json_text(doc, what);
  side.name = std::move(name);
  side.role = std::move(role);
  if (!capabilities.is_none()) side.capabilities = to_json_text(capabilities, what + "_capabilities");
  return side;
}

py::object negotiate(const py::object& local, const py::object& remote, std::optional<bool> same_host,
                     std::string local_name, std::string remote_name, std::optional<std::string> local_role,
                     std::optional<std::string> remote_role, const py::object& local_capabilities,
                     const py::object& remote_capabilities, const std::string& python_rule) {
  NegotiateSide a = side_argument(local, std::move(local_name), std::move(local_role), local_capabilities, "local");
  NegotiateSide b =
      side_argument(remote, std::move(remote_name), std::move(remote_role), remote_capabilities, "remote");
  NegotiateOptions options;
  options.same_host = same_host;
  auto rule = python_rule_from_string(python_rule);
  if (!rule)
    raise(make_error(Errc::usage, "python_rule " + python_rule + ": use exact, same-minor or same-major"));
  options.python_rule = *rule;
  Result<std::string> result = [&] {
    py::gil_scoped_release nogil;
    return daskcaps::negotiate(a, b, options);
  }();
  if (!result) raise(std::move(result).error());
  return json_text_to_python(*result);
}

CompressOptions compress_options(Codec codec, std::optional<int> level, int threads) {
  CompressOptions options;
  if (level) {
    const int l = *level;
    if (codec == Codec::zstd) options.zstd_level = l;
    if (codec == Codec::zlib) options.zlib_level = l;
  }
  options.zstd_workers = threads;
  if (auto st = validate(options); !st) raise(std::move(st).error());
  return options;
}

py::object compress(const py::object& codec_arg, const py::object& data, std::optional<int> level, int threads) {
  const Codec codec = codec_argument(codec_arg, "codec");
  const CompressOptions options = compress_options(codec, level, threads);
  BufferView in(data, "data");
  BytesRoom room;
  Status st = [&] {
    py::gil_scoped_release nogil;
    return compress_into(codec, in.span(), room, options);
  }();
  if (!st) raise(std::move(st).error());
  return room.take();
}

py::object decompress(const py::object& codec_arg, const py::object& data, std::uint64_t max_output) {
  const Codec codec = codec_argument(codec_arg, "codec");
  BufferView in(data, "data");
  BytesRoom room;
  Status st = [&] {
    py::gil_scoped_release nogil;
    return decompress_into(codec, in.span(), max_output, room);
  }();
  if (!st) raise(std::move(st).error());
  return room.take();
}

py::list recode(const py::object& frames_arg, const py::object& codec, const py::object& pickle_protocol,
                const py::object& layout, const py::object& accept_codecs, bool inline_buffers,
                bool keep_unconvertible, int zstd_level, int zstd_threads, const std::string& dask_release,
                std::uint64_t shard_bytes, const py::object& limits) {
  TranscodeOptions options;
  options.codec = target_codec(codec);
  options.pickle_protocol = target_protocol(pickle_protocol);
  options.layout_cpu = target_layout_cpu(layout);
  if (!accept_codecs.is_none()) {
    for (const py::handle c : accept_codecs) {
      const Codec a = codec_argument(c, "accept_codecs:");
      if (a != Codec::none) options.accept_codecs.push_back(a);
    }
  }
  options.inline_buffers = inline_buffers;
  options.keep_unconvertible = keep_unconvertible;
  options.compress.zstd_level = zstd_level;
  options.compress.zstd_workers = zstd_threads;
  options.rules = release_argument(dask_release).maybe_compress_rules();
  options.shard_bytes = shard_bytes;
  options.limits = limits_argument(limits);
  if (auto st = validate(options); !st) raise(std::move(st).error());

  InputFrames in(frames_arg);
  TranscodeReport report;
  bool passed_through = false;
  Result<std::vector<Bytes>> out = [&]() -> Result<std::vector<Bytes>> {
    py::gil_scoped_release nogil;
    std::vector<Bytes> frames = in.bytes();
    // What the command's reader checks of every message it reads.
    if (auto st = check_frames(frames, options.limits); !st) return std::move(st).error();
    return recode_message(RawMessage::of(std::move(frames)), options, report, passed_through);
  }();
  if (!out) raise(std::move(out).error());
  return in.to_python(*out);
}

py::object inspect(const py::object& frames_arg, bool dis, const py::object& limits) {
  DescribeOptions options;
  options.limits = limits_argument(limits);
  options.disassemble = dis;
  InputFrames in(frames_arg);
  Result<std::string> result = [&] {
    py::gil_scoped_release nogil;
    return inspect_message_json(in.bytes(), options);
  }();
  if (!result) raise(std::move(result).error());
  return json_text_to_python(*result);
}

}  // namespace

}  // namespace daskcaps::python

PYBIND11_MODULE(_core, m) {
  using namespace daskcaps;
  using namespace daskcaps::python;
  namespace py = pybind11;
  using py::arg;

  m.doc() = "The dask-caps core: probe, negotiate, compress, decompress, recode and inspect Dask messages "
            "with the rules and bytes of the dask-caps command. See dask_caps.__doc__.";
  m.attr("__version__") = DASKCAPS_PYTHON_VERSION;
  register_error(m);
  // The core's messages name limits and options as this module takes them.
  set_option_speller(python_spelling);
  register_buffers(m);
  register_link_chooser(m);

  py::tuple codecs(std::size(kAllCodecs));
  for (std::size_t i = 0; i < std::size(kAllCodecs); ++i) codecs[i] = py::str(std::string(codec_name(kAllCodecs[i])));
  m.attr("CODECS") = codecs;

  m.def("probe", &python::probe, arg("python") = py::none(), py::kw_only(), arg("timeout") = 60.0,
        "What `dask-caps probe --json` prints, as a dict.");
  m.def("negotiate", &python::negotiate, arg("local"), arg("remote"), py::kw_only(),
        arg("same_host") = py::none(), arg("local_name") = "local", arg("remote_name") = "remote",
        arg("local_role") = py::none(), arg("remote_role") = py::none(),
        arg("local_capabilities") = py::none(), arg("remote_capabilities") = py::none(),
        arg("python_rule") = "same-minor",
        "What `dask-caps check` says of the pair local-remote, with the plan per direction.");
  m.def("compress", &python::compress, arg("codec"), arg("data"), py::kw_only(), arg("level") = py::none(),
        arg("threads") = 0, "One frame compressed in Dask's format for `codec`; returns bytes.");
  m.def("decompress", &python::decompress, arg("codec"), arg("data"),
        arg("max_output") = Limits{}.max_decompressed_bytes,
        "One frame in Dask's format for `codec` decompressed, at most max_output bytes; returns bytes.");
  m.def("recode", &python::recode, arg("frames"), py::kw_only(), arg("codec") = py::none(),
        arg("pickle_protocol") = py::none(), arg("layout") = py::none(), arg("accept_codecs") = py::none(),
        arg("inline_buffers") = false, arg("keep_unconvertible") = false, arg("zstd_level") = 3,
        arg("zstd_threads") = 0, arg("dask_release") = "2022.12", arg("shard_bytes") = std::uint64_t{64} << 20,
        arg("limits") = py::none(),
        "One Dask message (its frames) recoded as `dask-caps transcode` recodes it; returns its frames.");
  register_delivery(m);
  register_capabilities(m);
  m.def("inspect", &python::inspect, arg("frames"), py::kw_only(), arg("dis") = false,
        arg("limits") = py::none(), "What `dask-caps inspect --json` says of one message, as a dict.");
}
