// recode_capture: a program of its own that uses libdaskcaps as installed
// (find_package(daskcaps CONFIG) or pkg-config; see CMakeLists.txt and
// README.md beside it). It reads a capture, decodes its messages, and
// recodes one of them for a recipient, as `dask-caps transcode --for` does.
//
//   recode_capture CAPTURE RECIPIENT [OUT]
//
//   CAPTURE    a raw stream or a pcap/pcapng capture (formats/message_source.h)
//   RECIPIENT  a probe file (`dask-caps probe --json`) or a live tcp:// address
//   OUT        where the recoded message is written, as a raw stream of one message
//
// It prints one line per message (index, offset, frames, wire bytes, what
// frame 0 is), the plan the recipient gets (core/caps/delivery.h deliver(): the
// function the CLI calls for --for), and what recoding the largest message
// did. Exit status: 0; 3 for bad input; 4 for a recipient it cannot reach;
// 2 for a usage error.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/delivery.h"
#include "daskcaps/caps/endpoint.h"
#include "daskcaps/formats/message_source.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/version.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"

namespace {

// One line, and the exit status of the CLI's rule: network kinds 4, usage
// 2, everything else (bad input, a file that cannot be read) 3.
int fail(const std::string& where, const daskcaps::Error& error) {
  std::fprintf(stderr, "recode_capture: %s: %s\n", where.c_str(), error.message().c_str());
  switch (error.code) {
    case daskcaps::Errc::network:
    case daskcaps::Errc::refused:
    case daskcaps::Errc::timeout:
    case daskcaps::Errc::tls:
    case daskcaps::Errc::protocol:
      return 4;
    case daskcaps::Errc::usage:
      return 2;
    default:
      return 3;
  }
}

// What frame 0 says: "handshake", "op X", "batched a,b", or "message".
std::string what(const daskcaps::Message& m) {
  if (m.is_handshake()) return "handshake";
  if (auto op = m.op()) return "op " + *op;
  std::vector<std::string> ops = m.batched_ops();
  if (ops.empty()) return "message";
  std::string s = "batched";
  for (std::size_t i = 0; i < ops.size(); ++i) s += (i == 0 ? " " : ",") + ops[i];
  return s;
}

struct Decoded {
  daskcaps::formats::SourceMessage source;
  daskcaps::Message message;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: recode_capture CAPTURE RECIPIENT [OUT]\n");
    return 2;
  }
  const std::string input = argv[1], recipient = argv[2];
  // The version this program was compiled against, and the library's.
  std::printf("libdaskcaps %s (compiled against %s)\n", daskcaps::version_string(), DASKCAPS_VERSION_STRING);
  if (daskcaps::version_number() / 100 != DASKCAPS_VERSION_NUMBER / 100) {
    std::fprintf(stderr, "recode_capture: libdaskcaps %s is not the 0.%d series this program was built for\n",
                 daskcaps::version_string(), DASKCAPS_VERSION_MINOR);
    return 2;
  }

  const daskcaps::Limits limits;  // the CLI's defaults
  auto source = daskcaps::formats::MessageSource::open(input, limits);
  if (!source) return fail(input, source.error());

  std::vector<Decoded> messages;
  std::size_t largest = 0;
  while (true) {
    auto next = (*source)->next();
    if (!next) return fail(input, next.error());
    if (!*next) break;
    daskcaps::formats::SourceMessage& sm = **next;
    auto parsed = daskcaps::parse_message(sm.raw, limits);
    if (!parsed) return fail(input + ": message " + std::to_string(sm.index), parsed.error());
    std::printf("message %zu @%llu: %zu frames, %llu bytes: %s, %zu objects\n", sm.index,
                static_cast<unsigned long long>(sm.raw.offset), sm.raw.frames.size(),
                static_cast<unsigned long long>(sm.raw.wire_size), what(*parsed).c_str(), parsed->objects.size());
    if (!messages.empty() && sm.raw.wire_size > messages[largest].source.raw.wire_size) largest = messages.size();
    messages.push_back({std::move(sm), std::move(*parsed)});
  }
  std::printf("%s: %s, %zu messages\n", input.c_str(),
              std::string(daskcaps::formats::to_string((*source)->format())).c_str(), messages.size());
  if (messages.empty()) return 0;

  // The recipient's plan: what the one policy (core/caps/delivery.h) says
  // dask-caps itself sends it.
  auto peer = daskcaps::peer_for_endpoint(recipient, daskcaps::EndpointOptions{});
  if (!peer) return fail(recipient, peer.error());
  daskcaps::DeliveryOptions to_file;
  to_file.order = daskcaps::DeliveryOptions::Order::receiver;
  auto plan = daskcaps::deliver(daskcaps::this_build(), *peer, to_file);
  if (!plan) return fail(recipient, plan.error());
  const bool cpu = plan->cpu_layout.value_or(false);
  const int protocol = static_cast<int>(plan->pickle_protocol);
  std::printf("recipient %s: codec %s, pickle protocol %d, layout %s\n", peer->name.c_str(),
              std::string(daskcaps::codec_name(plan->written())).c_str(), protocol, cpu ? "cpu" : "keep");

  daskcaps::TranscodeOptions options;
  options.limits = limits;
  options.codec = plan->written();
  options.pickle_protocol = protocol;
  options.layout_cpu = cpu;

  Decoded& chosen = messages[largest];
  daskcaps::TranscodeReport report;
  auto frames = daskcaps::transcode_message(chosen.message, options, report);
  if (!frames) return fail(input + ": message " + std::to_string(chosen.source.index), frames.error());
  const std::uint64_t out_bytes = daskcaps::message_wire_size(*frames);
  std::printf("recoded message %zu: %zu -> %zu frames, %llu -> %llu bytes; %zu frames recompressed, "
              "%zu pickles recoded, %zu buffers inlined, %zu arrays converted\n",
              chosen.source.index, chosen.source.raw.frames.size(), frames->size(),
              static_cast<unsigned long long>(chosen.source.raw.wire_size), static_cast<unsigned long long>(out_bytes),
              report.frames_recompressed, report.pickles_recoded, report.buffers_inlined, report.arrays_converted);
  for (const std::string& u : report.unconvertible) std::printf("  left as it is: %s\n", u.c_str());

  if (argc == 4) {
    const daskcaps::Buffer wire = daskcaps::encode_message(*frames);
    std::ofstream out(argv[3], std::ios::binary);
    out.write(reinterpret_cast<const char*>(wire.data()), static_cast<std::streamsize>(wire.size()));
    if (!out.flush()) {
      std::fprintf(stderr, "recode_capture: %s: cannot write\n", argv[3]);
      return 4;
    }
    std::printf("wrote %s\n", argv[3]);
  }
  return 0;
}
