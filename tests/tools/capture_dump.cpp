// capture_dump: what formats/internal/capture.h finds in a pcap/pcapng file, as JSON
// lines, for the end-to-end tests (until `dask-caps inspect` reads captures).
//
//   capture_dump FILE [--port P]... [--connection N] [--direction c2s|s2c]
//                [--tolerate-truncation] [--window-bytes N] [--raw-dir DIR]
//
// --raw-dir writes each direction's messages, re-framed with the full L, to
// DIR/conn<N>-<client_to_server|server_to_client>.bin (a raw stream file).
//
// One line per message, in capture order:
//   {"type":"message","connection":0,"direction":"client_to_server","index":0,
//    "timestamp":1700000000.1,"offset":0,"wire_size":86,"skipped_before":0,
//    "at_stream_start":true,"frames":[62],"op":null,"ops":[],"frame0":{...}}
// ("op": frame 0's "op"; "ops": the ops of frame 0, or of each message in a
// batched list.)
// ("frame0" is frame 0 as JSON when it is under 4 KiB: bin values become
// {"bin": size}, maps with non-string keys become [[k, v], ...].)
// then one line per connection ({"type":"connection", ...}), one per warning
// ({"type":"warning","text":...}) and a final {"type":"stats", ...}.
// A bad capture prints {"type":"error",...} and exits 3; usage errors exit 2.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/msgpack.h"
#include "formats/internal/capture.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using Json = nlohmann::ordered_json;

namespace {

Json to_json(const msgpack::Value& v) {
  using msgpack::Type;
  switch (v.type()) {
    case Type::nil: return nullptr;
    case Type::boolean: return v.as_bool();
    case Type::int_: {
      if (auto i = v.to_int64()) return *i;
      return *v.to_uint64();
    }
    case Type::float32:
    case Type::float64: return v.as_double();
    case Type::str: return v.as_str();
    case Type::bin: return Json{{"bin", v.as_bin().size()}};
    case Type::ext: return Json{{"ext", v.as_ext().type}, {"size", v.as_ext().data.size()}};
    case Type::array: {
      Json a = Json::array();
      for (const auto& e : v.as_array()) a.push_back(to_json(e));
      return a;
    }
    case Type::map: {
      bool string_keys = true;
      for (const auto& [k, e] : v.as_map()) string_keys = string_keys && k.is_str();
      if (string_keys) {
        Json o = Json::object();
        for (const auto& [k, e] : v.as_map()) o[k.as_str()] = to_json(e);
        return o;
      }
      Json pairs = Json::array();
      for (const auto& [k, e] : v.as_map()) pairs.push_back(Json::array({to_json(k), to_json(e)}));
      return pairs;
    }
  }
  return nullptr;
}

int usage(const char* why) {
  std::cerr << "capture_dump: " << why
            << "\nusage: capture_dump FILE [--port P]... [--connection N] [--direction c2s|s2c] "
               "[--tolerate-truncation] [--window-bytes N] [--raw-dir DIR]\n";
  return 2;
}

void print(const Json& j) { std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n'; }

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  std::string raw_dir;
  CaptureOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--port") {
      const char* v = value();
      if (v == nullptr) return usage("--port needs a value");
      options.ports.push_back(static_cast<std::uint16_t>(std::strtoul(v, nullptr, 10)));
    } else if (arg == "--connection") {
      const char* v = value();
      if (v == nullptr) return usage("--connection needs a value");
      options.reassembly.only_connection = std::strtoull(v, nullptr, 10);
    } else if (arg == "--direction") {
      const char* v = value();
      auto d = v ? parse_direction(v) : std::nullopt;
      if (!d) return usage("--direction takes c2s or s2c");
      options.reassembly.only_direction = *d;
    } else if (arg == "--window-bytes") {
      const char* v = value();
      if (v == nullptr) return usage("--window-bytes needs a value");
      options.reassembly.window_bytes = std::strtoull(v, nullptr, 10);
    } else if (arg == "--raw-dir") {
      const char* v = value();
      if (v == nullptr) return usage("--raw-dir needs a value");
      raw_dir = v;
    } else if (arg == "--tolerate-truncation") {
      options.tolerate_truncation = true;
    } else if (path.empty() && !arg.empty() && arg[0] != '-') {
      path = arg;
    } else {
      return usage(("unexpected argument " + arg).c_str());
    }
  }
  if (path.empty()) return usage("no capture file given");

  auto error_line = [&](const Error& e) {
    Json j{{"type", "error"}, {"code", std::string(to_string(e.code))}, {"message", e.message()}};
    j["offset"] = e.has_offset() ? Json(e.offset) : Json(nullptr);
    print(j);
    std::cerr << "capture_dump: " << path << ": " << e.message() << '\n';
    return 3;
  };

  const Limits limits;
  auto reader = PcapMessageReader::open(path, limits, options);
  if (!reader) return error_line(reader.error());
  PcapMessageReader& r = **reader;
  std::map<std::pair<std::size_t, int>, std::ofstream> raw;
  int rc = 0;
  for (;;) {
    auto next = r.next();
    if (!next) {
      rc = error_line(next.error());
      break;
    }
    if (!*next) break;
    const CaptureMessage& m = **next;
    if (!raw_dir.empty()) {
      auto& out = raw[{m.connection, static_cast<int>(m.direction)}];
      if (!out.is_open())
        out.open(raw_dir + "/conn" + std::to_string(m.connection) + "-" +
                     std::string(to_string(m.direction)) + ".bin",
                 std::ios::binary);
      const Buffer bytes = encode_message(std::span<const Bytes>(m.message.raw.memory_frames()));
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (!out) {
        std::cerr << "capture_dump: cannot write to " << raw_dir << '\n';
        return 2;
      }
    }
    Json j{{"type", "message"},
           {"connection", m.connection},
           {"direction", std::string(to_string(m.direction))},
           {"index", m.index},
           {"timestamp", m.timestamp},
           {"offset", m.message.raw.offset},
           {"wire_size", m.message.raw.wire_size},
           {"skipped_before", m.message.skipped_before},
           {"at_stream_start", m.at_stream_start()}};
    Json sizes = Json::array();
    for (const auto& f : m.message.raw.memory_frames()) sizes.push_back(f.size());
    j["frames"] = sizes;
    j["op"] = nullptr;
    if (!m.message.raw.frames.empty()) {
      auto v = msgpack::decode_all(m.message.raw.frames[0].bytes(), limits);
      if (!v) {
        j["frame0_error"] = v.error().message();
      } else {
        if (const auto* op = v->find("op"); op != nullptr && op->is_str()) j["op"] = op->as_str();
        // Batched streams send a list of messages in one frame.
        Json ops = Json::array();
        auto add_op = [&](const msgpack::Value& item) {
          if (const auto* op = item.find("op"); op != nullptr && op->is_str()) ops.push_back(op->as_str());
        };
        if (v->is_array()) {
          for (const auto& item : v->as_array()) add_op(item);
        } else {
          add_op(*v);
        }
        j["ops"] = ops;
        if (m.message.raw.frames[0].size() < 4096) j["frame0"] = to_json(*v);
      }
    }
    print(j);
  }
  for (const ConnectionInfo& c : r.connections()) {
    print(Json{{"type", "connection"},
               {"id", c.id},
               {"client", c.client},
               {"server", c.server},
               {"saw_syn", c.saw_syn},
               {"first_ts", c.first_ts},
               {"last_ts", c.last_ts},
               {"bytes", {c.bytes[0], c.bytes[1]}},
               {"skipped", {c.skipped[0], c.skipped[1]}},
               {"lost", {c.lost[0], c.lost[1]}},
               {"messages", {c.messages[0], c.messages[1]}},
               {"ended", c.ended}});
  }
  for (const Diagnostic& w : r.warnings())
    print(Json{{"type", "warning"}, {"kind", std::string(to_string(w.kind))}, {"text", w.text}});
  const CaptureStats& s = r.stats();
  print(Json{{"type", "stats"},
             {"format", std::string(pcap::to_string(r.format()))},
             {"packets", s.packets},
             {"tcp_segments", s.tcp_segments},
             {"filtered_out", s.filtered_out},
             {"other", s.other},
             {"fragments", s.fragments},
             {"cut_segments", s.cut_segments},
             {"malformed", s.malformed}});
  return rc;
}
