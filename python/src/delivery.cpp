#include "python/src/delivery.h"

#include <algorithm>
#include <optional>
#include <string>

#include "daskcaps/caps/delivery.h"
#include "daskcaps/wire/dask_release.h"
#include "python/src/errors.h"

namespace daskcaps::python {

namespace py = pybind11;
using py::arg;

namespace {

/// The receiver as deliver() reads it: a dict of the published
/// "capabilities" names ("codecs", "max-pickle-protocol", "gpu", "role").
/// Codec names that are not strings are not codecs it decodes.
Peer receiver_argument(const py::handle& value) {
  if (!py::isinstance<py::dict>(value))
    throw py::type_error("receiver: a dict with \"codecs\", \"max-pickle-protocol\", \"gpu\" and \"role\"");
  const auto doc = py::reinterpret_borrow<py::dict>(value);
  Peer p;
  p.name = "receiver";
  if (doc.contains("codecs")) {
    const py::object codecs = doc["codecs"];
    if (py::isinstance<py::str>(codecs) || !py::isinstance<py::iterable>(codecs))
      throw py::type_error("receiver[\"codecs\"]: a list of codec names");
    for (const py::handle c : codecs)
      if (py::isinstance<py::str>(c)) p.codecs.push_back(c.cast<std::string>());
  }
  if (doc.contains("max-pickle-protocol")) {
    const py::object v = doc["max-pickle-protocol"];
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
      throw py::type_error("receiver[\"max-pickle-protocol\"]: an int");
    // Past long long either way: the nearest end (a peer's number, never an error).
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    p.max_pickle_protocol = overflow > 0 ? 5 : overflow < 0 ? -1 : n;
  }
  if (doc.contains("gpu") && !doc["gpu"].is_none()) {
    const py::object v = doc["gpu"];
    if (!PyBool_Check(v.ptr())) throw py::type_error("receiver[\"gpu\"]: True, False or None");
    p.gpu = v.cast<bool>();
  }
  if (doc.contains("role") && !doc["role"].is_none()) {
    const py::object v = doc["role"];
    if (!py::isinstance<py::str>(v)) throw py::type_error("receiver[\"role\"]: a str or None");
    p.role = v.cast<std::string>();
  }
  return p;
}

std::optional<Codec> codec_option(const py::handle& value) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(value) && !value.cast<bool>()) return Codec::none;
  if (!py::isinstance<py::str>(value)) throw py::type_error("codec: a codec name, False (raw) or None");
  const std::string name = value.cast<std::string>();
  auto c = codec_from_name(name);
  if (!c) raise(make_error(Errc::unknown_codec, "codec " + name + ": not a codec this build writes"));
  return c;
}

std::optional<bool> layout_option(const py::handle& value) {
  if (value.is_none()) return std::nullopt;
  if (!py::isinstance<py::str>(value)) throw py::type_error("layout: \"cpu\", \"keep\" or None");
  const std::string l = value.cast<std::string>();
  if (l == "cpu") return true;
  if (l == "keep") return false;
  raise(make_error(Errc::usage, "layout " + l + ": use \"cpu\", \"keep\" or None"));
}

py::object name_or_none(const std::optional<std::string>& s) {
  if (!s) return py::none();
  return py::str(*s);
}

py::list names(const std::vector<Codec>& codecs) {
  py::list out;
  for (Codec c : codecs) out.append(py::str(std::string(codec_name(c))));
  return out;
}

py::dict deliver_py(const py::object& receiver_arg, const py::object& writes, const py::object& codec,
                    const py::object& pickle_protocol, const py::object& layout, bool keep_layout_for_schedulers) {
  const Peer receiver = receiver_argument(receiver_arg);
  Peer sender = this_build();
  DeliveryOptions options;
  if (writes.is_none()) {
    options.order = DeliveryOptions::Order::receiver;
  } else {
    if (py::isinstance<py::str>(writes) || !py::isinstance<py::iterable>(writes))
      throw py::type_error("writes: a list of codec names, or None");
    sender.codecs.clear();
    for (const py::handle c : writes) {
      if (!py::isinstance<py::str>(c)) throw py::type_error("writes: a list of codec names, or None");
      sender.codecs.push_back(c.cast<std::string>());
    }
  }
  options.codec = codec_option(codec);
  if (!pickle_protocol.is_none()) {
    if (!PyLong_Check(pickle_protocol.ptr()) || PyBool_Check(pickle_protocol.ptr()))
      throw py::type_error("pickle_protocol: an int from 0 to 5, or None");
    options.pickle_protocol = static_cast<int>(std::clamp<long long>(pickle_protocol.cast<long long>(), -1, 6));
  }
  options.cpu_layout = layout_option(layout);
  options.keep_layout_for_schedulers = keep_layout_for_schedulers;

  auto d = deliver(sender, receiver, options);
  if (!d) raise(std::move(d).error());
  py::dict out;
  out["codec"] = name_or_none(d->codec);
  out["accept"] = names(d->accept);
  out["pickle-protocol"] = py::int_(d->pickle_protocol);
  out["layout"] = d->cpu_layout ? py::object(py::str(*d->cpu_layout ? "cpu" : "gpu")) : py::object(py::none());
  // The arguments of recode() for this receiver; None when nothing changes.
  const TranscodeOptions t = d->recode_options(TranscodeOptions{});
  if (t.is_identity()) {
    out["recode"] = py::none();
  } else {
    py::dict r;
    if (!t.codec)
      r["codec"] = py::none();
    else if (*t.codec == Codec::none)
      r["codec"] = py::bool_(false);
    else
      r["codec"] = py::str(std::string(codec_name(*t.codec)));
    r["accept_codecs"] = names(d->accept);
    r["pickle_protocol"] = t.pickle_protocol ? py::object(py::int_(*t.pickle_protocol)) : py::object(py::none());
    r["layout"] = t.layout_cpu ? py::object(py::str("cpu")) : py::object(py::none());
    out["recode"] = r;
  }
  return out;
}

std::string dask_release_py(const std::string& distributed_version) {
  return std::string(DaskRelease::from_version(distributed_version).name());
}

}  // namespace

void register_delivery(py::module_& m) {
  m.def("deliver", &deliver_py, arg("receiver"), py::kw_only(), arg("writes") = py::none(),
        arg("codec") = py::none(), arg("pickle_protocol") = py::none(), arg("layout") = py::none(),
        arg("keep_layout_for_schedulers") = false,
        "What a receiver gets (the core's one policy): codec, accept, pickle-protocol, layout, and the "
        "arguments of recode() for it (None when nothing changes).");
  m.def("dask_release", &dask_release_py, arg("distributed_version"),
        "The behaviour of a distributed version: \"2022.12\" (before 2023.5.0) or \"newest\"; the "
        "dask_release= of recode() and LinkChooser.");
}

}  // namespace daskcaps::python
