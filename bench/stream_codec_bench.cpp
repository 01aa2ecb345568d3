// The decoder in pieces (core/wire/internal/stream_codec.h) against the whole-frame
// decoders, on what Dask sends most: an array frame, here a rounded random
// walk of float64 (numpy: np.round(np.cumsum(normal), 2)), lz4- and
// zstd-compressed as Dask does.
//   stream_codec_bench [MIB [PIECE_KIB [RUNS]]]     default 32 MiB, 256 KiB, 15
// Prints one line per decoder: MiB of output per second of the thread's
// CPU time, best of RUNS:
//   lz4 LZ4_decompress_safe   the whole block into a buffer made once
//   lz4 decompress()          codec.h, a new buffer each time
//   lz4 stream                FrameStreamDecoder fed PIECE_KIB pieces,
//                             each output piece dropped once handed out
// and the same for zstd (ZSTD_decompressDCtx for the first).
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench_timing.h"
#include "daskcaps/wire/codec.h"
#include "core/wire/internal/stream_codec.h"

using namespace daskcaps;

namespace {

Buffer random_walk(std::size_t bytes) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> step(0, 1);
  Buffer b = Buffer::uninitialised(bytes);
  double x = 0;
  for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
    x += step(rng);
    const double v = std::nearbyint(x * 100) / 100;
    std::memcpy(b.data() + i, &v, 8);
  }
  return b;
}

using daskcaps_bench::best_seconds;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "stream_codec_bench: %s\n", what);
  std::exit(1);
}

void stream(Codec c, const Buffer& frame, std::size_t piece, std::uint64_t want) {
  auto d = FrameStreamDecoder::start(c, frame, frame.size(), ~0ull);
  if (!d) die("start failed");
  std::vector<Bytes> out;
  std::uint64_t got = 0;
  for (std::size_t at = 0; at < frame.size(); at += piece) {
    if (!(*d)->feed(ByteSpan(frame).subspan(at, std::min(piece, frame.size() - at)), out))
      die("feed failed");
    for (const Bytes& b : out) got += b.size();
    out.clear();
  }
  if (!(*d)->finish(out)) die("finish failed");
  for (const Bytes& b : out) got += b.size();
  if (got != want) die("wrong output size");
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? static_cast<std::size_t>(std::atoi(argv[1])) : 32;
  const std::size_t piece = (argc > 2 ? static_cast<std::size_t>(std::atoi(argv[2])) : 256) << 10;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 15;
  const Buffer data = random_walk(mib << 20);
  const double out_mib = static_cast<double>(data.size()) / (1 << 20);
  auto report = [&](const char* name, double s) {
    std::printf("%-28s %8.1f MiB/s  (%.4f s)\n", name, out_mib / s, s);
  };

  const Buffer lz = *compress(Codec::lz4, data);
  std::printf("%zu MiB of a rounded random walk, pieces of %zu KiB: lz4 frame %zu bytes, ", mib,
              piece >> 10, lz.size());
  CompressOptions zo;
  const Buffer zs = *compress(Codec::zstd, data, zo);
  std::printf("zstd frame %zu bytes\n", zs.size());

  Buffer into(data.size(), 0);
  report("lz4 LZ4_decompress_safe", best_seconds(runs, [&] {
           const int n = LZ4_decompress_safe(
               reinterpret_cast<const char*>(lz.data() + 4), reinterpret_cast<char*>(into.data()),
               static_cast<int>(lz.size() - 4), static_cast<int>(into.size()));
           if (n != static_cast<int>(data.size())) die("LZ4_decompress_safe failed");
         }));
  report("lz4 decompress()", best_seconds(runs, [&] {
           if (!decompress(Codec::lz4, lz, ~0ull)) die("decompress failed");
         }));
  report("lz4 stream", best_seconds(runs, [&] { stream(Codec::lz4, lz, piece, data.size()); }));

  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  report("zstd ZSTD_decompressDCtx", best_seconds(runs, [&] {
           if (ZSTD_decompressDCtx(dctx, into.data(), into.size(), zs.data(), zs.size()) !=
               data.size())
             die("ZSTD_decompressDCtx failed");
         }));
  ZSTD_freeDCtx(dctx);
  report("zstd decompress()", best_seconds(runs, [&] {
           if (!decompress(Codec::zstd, zs, ~0ull)) die("decompress failed");
         }));
  report("zstd stream", best_seconds(runs, [&] { stream(Codec::zstd, zs, piece, data.size()); }));
  return 0;
}
