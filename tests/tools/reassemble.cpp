// Test tool: reads a raw stream, parses every message with the message
// model and assembles it again, writing a raw stream. With --recompress it
// also decompresses every frame of every sub-object and stores it raw, so
// the end-to-end test can make the real Dask load what the core re-encoded.
//   reassemble IN OUT [--recompress]
#include <cstdio>
#include <cstring>
#include <string>

#include "core/wire/internal/message_layout.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/serialized.h"
#include "formats/internal/raw_stream.h"

using namespace daskcaps;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: reassemble IN OUT [--recompress]\n");
    return 2;
  }
  const bool decompress_all = argc > 3 && std::strcmp(argv[3], "--recompress") == 0;
  auto reader = formats::RawStreamReader::open(argv[1], {});
  if (!reader) {
    std::fprintf(stderr, "reassemble: %s\n", reader.error().message().c_str());
    return 3;
  }
  std::FILE* out = std::fopen(argv[2], "wb");
  if (out == nullptr) return 3;
  for (;;) {
    auto next = (*reader)->next();
    if (!next) {
      std::fprintf(stderr, "reassemble: %s\n", next.error().message().c_str());
      return 3;
    }
    if (!*next) break;
    auto msg = parse_message(std::move(**next));
    if (!msg) {
      std::fprintf(stderr, "reassemble: %s\n", msg.error().message().c_str());
      return 3;
    }
    if (decompress_all) {
      for (SubObject& obj : msg->objects) {
        auto raw = decompressed_frames(obj, {});
        if (!raw) {
          std::fprintf(stderr, "reassemble: %s\n", raw.error().message().c_str());
          return 3;
        }
        obj.frames = std::move(*raw);
        std::vector<CompressionValue> none(obj.frames.size(), CompressionValue::nil());
        set_frame_compression(obj, none);
      }
    }
    auto frames = assemble_message(*msg);
    if (!frames) {
      std::fprintf(stderr, "reassemble: %s\n", frames.error().message().c_str());
      return 3;
    }
    Buffer bytes = encode_message(std::span<const Bytes>(*frames));
    std::fwrite(bytes.data(), 1, bytes.size(), out);
  }
  return std::fclose(out) == 0 ? 0 : 3;
}
