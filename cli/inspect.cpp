// dask-caps inspect DUMP [--json] [--message N] [--dis]
// Decodes captured Dask traffic and describes every message without
// executing anything. Thin: the input is opened by formats/message_source.h
// (raw streams, pcap and pcapng with TCP reassembly), the description in core/recode/describe.h, the
// negotiation in core/caps/caps.h, the rendering in cli/render_inspect.cpp.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <functional>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/render_inspect.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/recode/describe.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/formats/message_source.h"

namespace daskcaps::cli {

namespace {

// Messages of a raw stream at least this large are read from their frame 0
// and sub-headers (formats/internal/raw_stream.h).
constexpr std::uint64_t kInspectStoreBytes = std::uint64_t{16} << 20;

struct InspectOptions {
  std::string input;
  bool json = false;
  std::optional<std::size_t> message;
  bool dis = false;
  std::vector<std::uint16_t> ports;
  Limits limits;
};

std::string direction_short(formats::Direction d) {
  return d == formats::Direction::client_to_server ? "c2s" : "s2c";
}

struct ConnectionHandshakes {
  std::optional<Handshake> client, server;
};

Json connections_json(const std::vector<formats::ConnectionInfo>& conns,
                      const std::map<std::size_t, ConnectionHandshakes>& handshakes) {
  Json out = Json::array();
  for (const auto& c : conns) {
    Json j;
    j["id"] = c.id;
    j["client"] = c.client;
    j["server"] = c.server;
    j["saw-syn"] = c.saw_syn;
    j["first-timestamp"] = c.first_ts;
    j["last-timestamp"] = c.last_ts;
    j["bytes"] = {{"client-to-server", c.bytes[0]}, {"server-to-client", c.bytes[1]}};
    j["messages"] = {{"client-to-server", c.messages[0]}, {"server-to-client", c.messages[1]}};
    j["skipped-bytes"] = {{"client-to-server", c.skipped[0]}, {"server-to-client", c.skipped[1]}};
    j["lost-bytes"] = {{"client-to-server", c.lost[0]}, {"server-to-client", c.lost[1]}};
    j["ended"] = c.ended;
    auto it = handshakes.find(c.id);
    const ConnectionHandshakes* hs = it == handshakes.end() ? nullptr : &it->second;
    j["handshake"] = {
        {"client", hs && hs->client ? json_value(received_handshake_json(*hs->client)) : Json(nullptr)},
        {"server", hs && hs->server ? json_value(received_handshake_json(*hs->server)) : Json(nullptr)}};
    if (hs && hs->client && hs->server) {
      DaskNegotiation n = dask_negotiate(*hs->client, *hs->server);
      Json neg;
      neg["ok"] = n.ok;
      if (!n.ok) neg["failure"] = n.failure;
      neg["compression"] = n.compression.kind == CompressionValue::Kind::name ? Json(n.compression.name)
                           : n.compression.kind == CompressionValue::Kind::false_ ? Json(false)
                                                                                   : Json(nullptr);
      neg["pickle-protocol"] = n.ok ? Json(n.pickle_protocol) : Json(nullptr);
      j["negotiated"] = std::move(neg);
    } else {
      j["negotiated"] = nullptr;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void connections_text(std::ostream& out, const std::vector<formats::ConnectionInfo>& conns,
                      const std::map<std::size_t, ConnectionHandshakes>& handshakes) {
  for (const auto& c : conns) {
    out << "connection " << c.id << "  " << c.client << " -> " << c.server << "  "
        << c.messages[0] << "+" << c.messages[1] << " messages, " << c.bytes[0] << "+" << c.bytes[1]
        << " bytes";
    if (c.skipped[0] || c.skipped[1]) out << ", skipped " << c.skipped[0] << "+" << c.skipped[1];
    if (!c.saw_syn) out << ", started before the capture";
    out << '\n';
    auto it = handshakes.find(c.id);
    if (it == handshakes.end() || !it->second.client || !it->second.server) {
      out << "  handshake: not captured\n";
      continue;
    }
    const Handshake& a = *it->second.client;
    const Handshake& b = *it->second.server;
    auto side = [&](const char* who, const Handshake& h) {
      out << "  " << who << " sent compression=" << (h.compression ? h.compression->to_string() : "<missing>")
          << " python=" << (h.python ? h.python_version() : "<missing>") << " pickle-protocol="
          << (h.pickle_protocol ? std::to_string(*h.pickle_protocol) : "<missing>") << '\n';
    };
    side("client", a);
    side("server", b);
    DaskNegotiation n = dask_negotiate(a, b);
    if (n.ok)
      out << "  negotiated compression=" << n.compression.to_string()
          << " pickle-protocol=" << n.pickle_protocol << '\n';
    else
      out << "  Dask fails this handshake: " << n.failure << '\n';
  }
}

int run_inspect(const InspectOptions& opt) {
  formats::SourceOptions sopt;
  sopt.capture.ports = opt.ports;
  // Large messages of a raw stream stay in the file but for their headers:
  // describe_message() measures their frames in windows.
  sopt.store_bytes = kInspectStoreBytes;
  auto source = formats::MessageSource::open(opt.input, opt.limits, sopt);
  if (!source) return report_error(opt.input, source.error());
  formats::MessageSource& src = **source;

  DescribeOptions dopt;
  dopt.limits = opt.limits;
  dopt.disassemble = opt.dis;

  Json messages = Json::array();
  std::map<std::size_t, ConnectionHandshakes> handshakes;
  std::size_t count = 0, objects = 0;
  std::uint64_t bytes = 0;
  std::optional<Error> first_bad;
  int exit_code = kExitOk;

  for (;;) {
    auto item = src.next();
    if (!item) {
      exit_code = report_error(opt.input, item.error());
      break;
    }
    if (!*item) break;
    formats::SourceMessage& it = **item;
    ++count;
    bytes += it.raw.wire_size;
    const bool wanted = !opt.message || *opt.message == it.index;

    // Where the message was; its frames go to the parser.
    const std::uint64_t at = it.raw.offset;
    const std::uint64_t wire_size = it.raw.wire_size;
    const bool short_length = it.raw.short_length;
    const std::vector<std::uint64_t> offsets = it.raw.frame_offsets();
    auto parsed = parse_message(std::move(it.raw), opt.limits, offsets);
    if (parsed && it.connection && it.at_stream_start && parsed->is_handshake()) {
      auto h = handshake_from_msgpack(parsed->root);
      if (h) {
        auto& slot = handshakes[*it.connection];
        (it.direction == formats::Direction::client_to_server ? slot.client : slot.server) = std::move(*h);
      }
    }
    if (!wanted) continue;

    Json where;
    std::string where_text;
    if (it.connection) {
      where["connection"] = *it.connection;
      where["direction"] = std::string(formats::to_string(*it.direction));
      where["timestamp"] = it.timestamp.value_or(0);
      where_text = "conn " + std::to_string(*it.connection) + " " + direction_short(*it.direction) + "  ";
    }
    if (!parsed) {
      Error e = std::move(parsed).error();
      e.add_context("message " + std::to_string(it.index));
      if (opt.json) {
        Json bad = where;
        bad["index"] = it.index;
        bad["offset"] = at;
        bad["wire-bytes"] = wire_size;
        bad["error"] = e.message();
        messages.push_back(std::move(bad));
      } else {
        std::cout << where_text << "message " << it.index << " @" << hex_offset(at)
                  << "  unreadable: " << e.message() << '\n';
      }
      if (!first_bad) first_bad = std::move(e);
      continue;
    }
    MessageReport report = describe_message(*parsed, dopt);
    if (!first_bad) {
      // A problem inside an object (a frame that does not decompress, a
      // pickle that does not parse, a limit crossed) is bad input too: the
      // whole capture is still described, then the exit code says so.
      std::function<const Diagnostic*(const ObjectReport&)> first_problem =
          [&](const ObjectReport& o) -> const Diagnostic* {
        if (!o.problems.empty()) return &o.problems.front();
        for (const ObjectReport& e : o.elements)
          if (const Diagnostic* p = first_problem(e)) return p;
        return nullptr;
      };
      for (const ObjectReport& o : report.objects) {
        if (const Diagnostic* p = first_problem(o)) {
          // The text already says where (its offsets are in it).
          first_bad = make_error(Errc::bad_value, p->text);
          first_bad->add_context(o.path);
          first_bad->add_context("message " + std::to_string(it.index));
          break;
        }
      }
    }
    report.index = it.index;
    report.offset = at;
    report.wire_bytes = wire_size;
    report.skipped_before = it.skipped_before;
    report.short_length = short_length;
    objects += report.objects.size();
    if (opt.json) {
      Json j = where;
      Json body = json_value(message_report_json(report));
      for (auto& [k, v] : body.items()) j[k] = std::move(v);
      messages.push_back(std::move(j));
    } else {
      std::cout << where_text;
      render_message_text(std::cout, report);
    }
  }

  if (opt.message && *opt.message >= count && exit_code == kExitOk)
    return report_error(opt.input, make_error(Errc::usage, "--message " + std::to_string(*opt.message) +
                                                               ": the input holds " +
                                                               std::to_string(count) + " messages"));
  if (opt.json) {
    Json doc = json_document("dask-caps.inspect/1");
    doc["input"] = opt.input;
    doc["format"] = std::string(formats::to_string(src.format()));
    const std::vector<Diagnostic> warnings = src.warnings();
    if (src.is_capture()) {
      doc["connections"] = connections_json(src.connections(), handshakes);
      doc["warnings"] = diagnostic_texts(warnings);
    }
    doc["diagnostics"] = json_value(diagnostics_json(warnings));
    doc["messages"] = std::move(messages);
    doc["summary"] = {{"messages", count}, {"objects", objects}, {"bytes", bytes}};
    print_json(doc);
  } else {
    if (src.is_capture()) {
      connections_text(std::cout, src.connections(), handshakes);
      for (const Diagnostic& w : src.warnings()) std::cout << "warning: " << w.text << '\n';
    }
    std::cout << count << (count == 1 ? " message, " : " messages, ") << objects
              << (objects == 1 ? " object, " : " objects, ") << bytes << " bytes\n";
  }
  if (exit_code != kExitOk) return exit_code;
  if (first_bad) return report_error(opt.input, *first_bad);
  return kExitOk;
}

}  // namespace

void add_inspect(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "decode captured Dask traffic and describe each message");
  cmd->add_option("DUMP", opt->input,
                  "raw stream (what one side of a Dask TCP comm wrote) or pcap/pcapng capture")
      ->required();
  cmd->add_flag("--json", opt->json, "print one JSON document (schema dask-caps.inspect/1)");
  cmd->add_option("--message", opt->message, "describe only message N (0-based)");
  cmd->add_flag("--dis", opt->dis, "disassemble every pickle like Python's pickletools");
  cmd->add_option("--port", opt->ports, "pcap: only TCP segments to or from these ports");
  add_limit_flags(*cmd, opt->limits);
  cmd->callback([opt, &exit_code] { exit_code = run_inspect(*opt); });
}

}  // namespace daskcaps::cli
