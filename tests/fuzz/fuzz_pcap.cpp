// fuzz_pcap: capture files (formats/internal/capture.h): libpcap and pcapng reading
// (formats/internal/pcap.h), link/IP/TCP decoding, TCP reassembly
// (formats/internal/tcp_reassembly.h) and message extraction per direction.
//
// Input: a whole capture file, as `inspect capture.pcap` would read it.
// The low bit of the last byte turns on tolerate_truncation (both ways of
// ending inside a record get exercised; the bit is part of the capture,
// which the reader sees unchanged).
//
// Properties, once the capture has been drained:
//  1. every message names a connection that connections() lists, and the
//     per-direction message counts of connections() add up to the messages
//     yielded, each direction's indices count up from 0, and the bytes a
//     direction lost are among the bytes it skipped;
//  2. after an error, next() keeps returning an error.
#include <cstdint>
#include <map>
#include <utility>

#include "formats/internal/capture.h"
#include "fuzz_common.h"

using namespace daskcaps;
using namespace daskcaps::formats;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan file(data, size);
  const Limits limits = fuzzsupport::fuzz_limits();
  CaptureOptions options;
  options.tolerate_truncation = size > 0 && (data[size - 1] & 1) != 0;
  options.reader.max_packet_bytes = 1 << 18;
  (void)PcapMessageReader::sniff(file);

  auto reader = PcapMessageReader::open_memory(file, limits, options);
  if (!reader) {
    (void)reader.error().message();
    return 0;
  }
  PcapMessageReader& r = **reader;
  (void)r.format();

  std::uint64_t yielded = 0;
  std::map<std::pair<std::size_t, int>, std::uint64_t> next_index;
  bool failed = false;
  for (;;) {
    auto m = r.next();
    if (!m) {
      (void)m.error().message();
      failed = true;
      break;
    }
    if (!*m) break;
    const CaptureMessage& cm = **m;
    FUZZ_CHECK(cm.connection < r.connections().size());
    FUZZ_CHECK(!cm.message.raw.frames.empty());
    std::uint64_t& want = next_index[{cm.connection, static_cast<int>(cm.direction)}];
    FUZZ_CHECK(cm.index == want);
    ++want;
    (void)cm.at_stream_start();
    ++yielded;
  }
  // 2. Errors stick.
  if (failed) FUZZ_CHECK(!r.next().ok());

  // 1. The connection table agrees with what came out.
  std::uint64_t counted = 0;
  for (std::size_t i = 0; i < r.connections().size(); ++i) {
    const ConnectionInfo& c = r.connections()[i];
    FUZZ_CHECK(c.id == i);
    for (int d = 0; d < 2; ++d) {
      if (!failed) FUZZ_CHECK(c.lost[d] <= c.skipped[d]);  // lost bytes are skipped bytes
      counted += c.messages[d];
    }
  }
  if (!failed) FUZZ_CHECK(counted == yielded);
  for (const Diagnostic& w : r.warnings()) FUZZ_CHECK(!w.text.empty() && to_string(w.kind) != "unknown");
  (void)r.stats();
  return 0;
}
