// The floor for recoding a capture's frames: decompress every lz4 frame and
// compress it with zstd (level 3) in plain C calls, on N threads, nothing
// else — no parsing, no file output. bench/transcode_bench.py compares
// `dask-caps transcode` with it.
//   codec_floor_bench STREAM [THREADS]
// Prints JSON: bytes, best-of-3 seconds for lz4 decompression alone and
// for lz4 -> zstd.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/serialized.h"
#include "formats/internal/raw_stream.h"

using namespace daskcaps;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: codec_floor_bench STREAM [THREADS]\n");
    return 2;
  }
  const unsigned threads = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : std::thread::hardware_concurrency();
  auto reader = formats::RawStreamReader::open(argv[1], {});
  if (!reader) return 3;
  std::vector<Bytes> frames;
  std::uint64_t bytes = 0, raw = 0;
  for (;;) {
    auto m = (*reader)->next();
    if (!m || !*m) break;
    auto msg = parse_message(std::move(**m));
    if (!msg) continue;
    for (const SubObject& obj : msg->objects) {
      auto codecs = frame_compression(obj);
      if (!codecs) continue;
      for (std::size_t i = 0; i < obj.frames.size(); ++i) {
        if ((*codecs)[i].compresses() && (*codecs)[i].name == "lz4") {
          frames.push_back(obj.frames[i]);
          bytes += obj.frames[i].size();
          raw += *declared_size(Codec::lz4, obj.frames[i]);
        }
      }
    }
  }
  auto run = [&](bool recompress) {
    std::atomic<std::size_t> next{0};
    std::atomic<std::uint64_t> out{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (std::size_t i = next++; i < frames.size(); i = next++) {
          auto d = decompress(Codec::lz4, frames[i], ~0ull);
          if (!d) std::abort();
          if (recompress) {
            auto z = compress(Codec::zstd, *d);
            out += z->size();
          } else {
            out += d->size();
          }
        }
      });
    for (auto& t : pool) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Best of three: a single run on a shared machine says more about the
  // neighbours than about the codecs.
  double lz4_only = run(false), lz4_zstd = run(true);
  for (int i = 0; i < 2; ++i) {
    lz4_only = std::min(lz4_only, run(false));
    lz4_zstd = std::min(lz4_zstd, run(true));
  }
  std::printf("{\"frames\": %zu, \"lz4-bytes\": %llu, \"raw-bytes\": %llu, \"threads\": %u, "
              "\"lz4-decompress-s\": %.4f, \"lz4-to-zstd-s\": %.4f}\n",
              frames.size(), static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(raw),
              threads, lz4_only, lz4_zstd);
  return 0;
}
