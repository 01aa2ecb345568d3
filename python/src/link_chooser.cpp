// LinkChooser(receiver_codecs, *, same_host=False, pin=None, zstd_levels=(1, 3),
//             dask_release="newest", vote_bytes=1 MiB, margin=0.15, votes=3,
//             host="")  host: the peer's IP, for the process's memory of
//                       links (a new connection starts from its rate)
//   .observe_socket(fd) -> bool      TCP_INFO of the comm's socket
//   .observe_write(nbytes, seconds)  how long a large write took
//   .take_host_rate() -> bool        the host's remembered rate, now
//   .observe_compress(codec, nbytes, seconds, level=None)
//                                    how long compressing a frame took here
//   .choose(frame) -> str | None     the codec for this frame ("none" for
//                                    raw); None: the link is unknown, keep
//                                    today's choice. .level: its zstd level.
//   .changed, .last_change (dict with "line", the log line), .current,
//   .changes, .rate, .rate_source, .rtt, .candidates, .may_code
// One object per connection. The core object sits behind a mutex, so that
// choose() works without the GIL (it compresses a sample) and two threads
// never use it at once; every method lets go of the GIL before it waits
// for the mutex.
#include "python/src/link_chooser.h"

#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/caps/link_choice.h"
#include "python/src/buffers.h"
#include "python/src/errors.h"
#include "python/src/release.h"

namespace py = pybind11;

namespace daskcaps::python {

namespace {

py::object choice_or_none(const std::optional<link::CodecChoice>& c) {
  if (!c) return py::none();
  return py::str(link::choice_name(*c));
}

class PyLinkChooser {
 public:
  PyLinkChooser(const py::iterable& receiver_codecs, bool same_host, const py::object& pin,
                const std::vector<int>& zstd_levels, const std::string& dask_release, std::uint64_t vote_bytes,
                double margin, std::uint32_t votes, const std::string& host) {
    link::ChooserOptions o;
    for (const py::handle c : receiver_codecs) {
      // A receiver may publish codecs this build does not have (and Dask
      // writes None for none): they are simply not choices.
      if (!py::isinstance<py::str>(c)) continue;
      if (auto codec = codec_from_name(c.cast<std::string>()); codec && *codec != Codec::none)
        o.receiver_codecs.push_back(*codec);
    }
    o.same_host = same_host;
    if (!pin.is_none()) {
      if (!py::isinstance<py::str>(pin)) throw py::type_error("pin: a codec name such as \"lz4\" or \"zstd-3\"");
      const std::string p = pin.cast<std::string>();
      auto choice = link::parse_choice(p);
      if (!choice) raise(make_error(Errc::unknown_codec, "pin " + p + ": not a codec this build has"));
      if (choice->codec == Codec::zstd && choice->level == 0) choice->level = 3;
      o.pin = choice;
    }
    o.zstd_levels = zstd_levels;
    o.rules = release_argument(dask_release).maybe_compress_rules();
    ratio_ = o.rules.ratio;
    o.vote_bytes = vote_bytes;
    o.margin = margin;
    o.votes = votes;
    o.host = host;
    auto made = link::LinkChooser::make(std::move(o));
    if (!made) raise(std::move(made).error());
    chooser_.emplace(std::move(*made));
  }

  bool observe_socket(int fd) {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    return chooser_->observe_socket(fd);
  }

  bool take_host_rate() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    return chooser_->take_host_rate();
  }

  void observe_write(std::uint64_t bytes, double seconds) {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    chooser_->observe_write(bytes, seconds);
  }

  void observe_compress(const std::string& codec, std::uint64_t bytes, double seconds, std::optional<int> level) {
    auto choice = link::parse_choice(codec);
    if (!choice) raise(make_error(Errc::unknown_codec, "codec " + codec + ": not a codec this build has"));
    if (level) choice->level = choice->codec == Codec::zstd ? *level : 0;
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    chooser_->observe_compress(*choice, bytes, seconds);
  }

  py::object choose(const py::object& frame) {
    BufferView in(frame, "frame");
    std::optional<link::CodecChoice> c;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mutex_);
      c = chooser_->choose(in.span());
      level_ = c && c->codec == Codec::zstd ? std::optional<int>(c->level) : std::nullopt;
    }
    if (!c) return py::none();
    return py::str(std::string(codec_name(c->codec)));
  }

  template <typename F>
  auto read(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    return f(*chooser_);
  }

  double ratio() const { return ratio_; }
  std::optional<int> level() { return read([&](const link::LinkChooser&) { return level_; }); }
  bool changed() { return read([](const link::LinkChooser& c) { return c.changed(); }); }
  std::uint64_t changes() { return read([](const link::LinkChooser& c) { return c.changes(); }); }
  std::optional<double> rate() { return read([](const link::LinkChooser& c) { return c.rate(); }); }
  std::optional<double> rtt() { return read([](const link::LinkChooser& c) { return c.rtt(); }); }
  double slowdown() { return read([](const link::LinkChooser& c) { return c.slowdown(); }); }
  bool may_code() { return read([](const link::LinkChooser& c) { return c.may_code(); }); }
  std::string rate_source() {
    return read([](const link::LinkChooser& c) { return std::string(c.rate_source()); });
  }
  py::object current() { return choice_or_none(read([](const link::LinkChooser& c) { return c.current(); })); }
  py::object current_codec() {
    const auto c = read([](const link::LinkChooser& ch) { return ch.current(); });
    if (!c) return py::none();
    return py::str(std::string(codec_name(c->codec)));
  }
  py::list candidates() {
    const auto all = read([](const link::LinkChooser& c) { return c.candidates(); });
    py::list out;
    for (const auto& c : all) out.append(py::str(link::choice_name(c)));
    return out;
  }
  py::object last_change() {
    const auto change = read([](const link::LinkChooser& c) { return c.last_change(); });
    if (!change) return py::none();
    py::dict d;
    d["from"] = choice_or_none(change->from);
    d["to"] = py::str(link::choice_name(change->to));
    d["rate"] = change->rate;
    d["ratio"] = change->ratio;
    d["frame_bytes"] = change->frame_bytes;
    d["number"] = change->number;
    d["line"] = link::describe(*change);
    return d;
  }

 private:
  std::mutex mutex_;
  std::optional<link::LinkChooser> chooser_;
  std::optional<int> level_;
  double ratio_ = 0;
};

}  // namespace

void register_link_chooser(py::module_& m) {
  using py::arg;
  py::class_<PyLinkChooser>(m, "LinkChooser",
                            "The codec for each frame on one connection: the one that delivers it soonest on "
                            "this link, among none and the codecs the receiver decodes (docs/link-choice.md).")
      .def(py::init<const py::iterable&, bool, const py::object&, const std::vector<int>&, const std::string&,
                    std::uint64_t, double, std::uint32_t, const std::string&>(),
           arg("receiver_codecs"), py::kw_only(), arg("same_host") = false, arg("pin") = py::none(),
           arg("zstd_levels") = std::vector<int>{1, 3}, arg("dask_release") = "newest",
           arg("vote_bytes") = std::uint64_t{1} << 20, arg("margin") = 0.15, arg("votes") = 3u, arg("host") = "")
      .def("observe_socket", &PyLinkChooser::observe_socket, arg("fd"),
           "Reads TCP_INFO of the socket `fd`; False when it gives no link figures.")
      .def("take_host_rate", &PyLinkChooser::take_host_rate,
           "Without a TCP sample yet, takes the rate the process's memory holds for `host` now (after "
           "reading the host's other connections); True when it took one.")
      .def("observe_write", &PyLinkChooser::observe_write, arg("nbytes"), arg("seconds"),
           "A write of nbytes took this many seconds (ignored below 1 MiB).")
      .def("observe_compress", &PyLinkChooser::observe_compress, arg("codec"), arg("nbytes"), arg("seconds"),
           arg("level") = py::none(),
           "Compressing nbytes with codec (\"lz4\", \"zstd\" with level, ...) took this many seconds here "
           "(ignored below vote_bytes): every codec's speed is divided by how much slower than calibrated "
           "that was (.slowdown).")
      .def("choose", &PyLinkChooser::choose, arg("frame"),
           "The codec for this frame (\"none\": raw), or None when the link is unknown.")
      .def_property_readonly("level", &PyLinkChooser::level, "The zstd level of the last choice, else None.")
      .def_property_readonly("changed", &PyLinkChooser::changed, "Whether the last choose() changed the choice.")
      .def_property_readonly("changes", &PyLinkChooser::changes)
      .def_property_readonly("last_change", &PyLinkChooser::last_change,
                             "The last change as a dict (\"line\": one line for the log), or None.")
      .def_property_readonly("current", &PyLinkChooser::current, "The connection's choice (\"zstd-1\", ...), or None.")
      .def_property_readonly("current_codec", &PyLinkChooser::current_codec,
                             "The codec of the connection's choice, as Dask names a frame's (\"zstd\" for any "
                             "level), or None.")
      .def_property_readonly("rate", &PyLinkChooser::rate, "The link's rate in bytes per second, or None.")
      .def_property_readonly("rate_source", &PyLinkChooser::rate_source, "\"tcp\", \"tcp floor\", \"host\", \"writes\" or \"unknown\" (LinkChooser::rate_source).")
      .def_property_readonly("rtt", &PyLinkChooser::rtt, "The last RTT TCP_INFO gave, in seconds, or None.")
      .def_property_readonly("slowdown", &PyLinkChooser::slowdown,
                             "How much slower than calibrated this connection's compression ran (1: no "
                             "observation yet).")
      .def_property_readonly("may_code", &PyLinkChooser::may_code,
                             "Whether choose() could name a codec other than none now, without a frame: a pin, "
                             "or a known rate at which some codec beats none (LinkChooser::may_code).")
      .def_property_readonly("candidates", &PyLinkChooser::candidates)
      .def_property_readonly("ratio", &PyLinkChooser::ratio,
                             "Dask's maybe_compress ratio of its dask_release: a coded frame is kept only when "
                             "at most this fraction of the raw one.");
}

}  // namespace daskcaps::python
