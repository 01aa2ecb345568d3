#include "core/wire/detail/codec_contexts.h"

#include <string>

#include "core/wire/internal/frame_encoder.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::detail {

namespace {
// The size of one zstd job. Measured on 2 cores (libzstd 1.5.4, level 3, an
// 8 MiB rounded random walk): 512 KiB jobs (zstd's smallest) take 0.31 s
// per 8 frames against 0.33 s alone, the workers mostly waiting on each
// other; 1 MiB jobs take 0.24 s and 2 MiB ones 0.21-0.23 s, but in a whole
// transcode 1 MiB jobs are as fast as 2 MiB ones for 7 MiB less peak RSS.
constexpr int kZstdJobBytes = 1 << 20;
}  // namespace

ZstdCompressContext& thread_zstd_cctx() {
  thread_local ZstdCompressContext ctx;
  return ctx;
}

ZstdDecompressContext& thread_zstd_dctx() {
  thread_local ZstdDecompressContext ctx;
  return ctx;
}

namespace {
struct KeptStreamContext {
  ZSTD_CCtx* ctx = nullptr;
  ~KeptStreamContext() { ZSTD_freeCCtx(ctx); }
};
KeptStreamContext& kept_stream_cctx() {
  thread_local KeptStreamContext kept;
  return kept;
}
}  // namespace

ZSTD_CCtx* take_stream_cctx() {
  KeptStreamContext& kept = kept_stream_cctx();
  ZSTD_CCtx* ctx = kept.ctx != nullptr ? kept.ctx : ZSTD_createCCtx();
  kept.ctx = nullptr;
  return ctx;
}

void give_back_stream_cctx(ZSTD_CCtx* cctx) {
  KeptStreamContext& kept = kept_stream_cctx();
  if (kept.ctx == nullptr && ZSTD_sizeof_CCtx(cctx) <= kKeepScratchBytes) {
    kept.ctx = cctx;
    return;
  }
  ZSTD_freeCCtx(cctx);
}

Error decodes_too_large(std::uint64_t limit, std::string_view codec) {
  return make_error(Errc::limit_exceeded, std::string(codec) + " frame decodes to more than the limit of " +
                                              std::to_string(limit) + " bytes (" + option_name("max_decompressed_bytes") + ")");
}

bool zstd_parallel(std::uint64_t size, int workers) { return workers > 1 && size >= kZstdParallelBytes; }

void zstd_prepare(ZSTD_CCtx* cctx, int level, std::uint64_t size, int workers) {
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (zstd_parallel(size, workers)) {
    // Fails on a libzstd built without threads: then it compresses alone.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, workers);
    // zstd's default job is 4 windows (8 MiB at level 3): a frame of the
    // size Dask sends would be one job on one thread. Jobs of kZstdJobBytes
    // keep every worker busy without the hand-offs of the smallest ones.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_jobSize, kZstdJobBytes);
  }
  ZSTD_CCtx_setPledgedSrcSize(cctx, size);
}

}  // namespace daskcaps::detail
