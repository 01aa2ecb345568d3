// Per-thread codec state shared by the whole-frame codecs (core/wire/codec.cpp)
// and the ones that work in windows (core/wire/internal/window_codec.cpp): zstd
// contexts made once per thread and reused (making one costs its tables,
// about 1.3 MiB at level 3, for every frame). A context that a frame made
// larger than kKeepScratchBytes (level 19's tables, a large window, a
// parallel compression's workers) is given back after that frame, so a
// thread keeps at most that much between frames. Output buffers are never
// per-thread scratch: each codec writes into the buffer it returns.
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daskcaps/base/result.h"

namespace daskcaps::detail {

inline constexpr std::size_t kKeepScratchBytes = std::size_t{16} << 20;

template <typename Ctx, Ctx* (*Create)(), std::size_t (*Free)(Ctx*), std::size_t (*Size)(const Ctx*)>
class ThreadContext {
 public:
  ~ThreadContext() { Free(ctx_); }
  Ctx* get() {
    if (ctx_ == nullptr) ctx_ = Create();
    return ctx_;
  }
  /// Gives the context back when it has grown past what a thread may keep.
  void trim() {
    if (ctx_ != nullptr && Size(ctx_) > kKeepScratchBytes) {
      Free(ctx_);
      ctx_ = nullptr;
    }
  }

 private:
  Ctx* ctx_ = nullptr;
};

using ZstdCompressContext = ThreadContext<ZSTD_CCtx, ZSTD_createCCtx, ZSTD_freeCCtx, ZSTD_sizeof_CCtx>;
using ZstdDecompressContext = ThreadContext<ZSTD_DCtx, ZSTD_createDCtx, ZSTD_freeDCtx, ZSTD_sizeof_DCtx>;

/// This thread's contexts.
ZstdCompressContext& thread_zstd_cctx();
ZstdDecompressContext& thread_zstd_dctx();

/// This thread's decompression context for one frame: reset for it when
/// made, trimmed when the frame is done. get() is null when zstd is out of
/// memory.
class ZstdFrameDecoder {
 public:
  ZstdFrameDecoder() : ctx_(thread_zstd_dctx()) {
    if (ZSTD_DCtx* d = ctx_.get()) ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
  }
  ~ZstdFrameDecoder() { ctx_.trim(); }
  ZstdFrameDecoder(const ZstdFrameDecoder&) = delete;
  ZstdFrameDecoder& operator=(const ZstdFrameDecoder&) = delete;
  ZSTD_DCtx* get() { return ctx_.get(); }

 private:
  ZstdDecompressContext& ctx_;
};

/// A compression context for a streaming encoder (core/wire/internal/frame_encoder.h),
/// this thread's kept one when it has one: an encoder's context holds the
/// frame's window (2 MiB at level 3) besides the tables, and making one for
/// every frame faulted them in afresh each time. give_back_stream_cctx()
/// keeps it for the next encoder of this thread (one; trimmed as above) or
/// frees it.
ZSTD_CCtx* take_stream_cctx();
void give_back_stream_cctx(ZSTD_CCtx* cctx);

/// Errc::limit_exceeded for a frame that declares no size and is found,
/// while decoding, to make more than `limit` bytes.
Error decodes_too_large(std::uint64_t limit, std::string_view codec);

/// Whether a zstd frame of `size` bytes is compressed by `workers` workers
/// (core/wire/internal/frame_encoder.h: kZstdParallelBytes and more, 2 workers or more).
bool zstd_parallel(std::uint64_t size, int workers);

/// Prepares `cctx` (reset) for one frame of `size` bytes as both compress()
/// and FrameEncoder write it: the level, the content size pledged, and for
/// a parallel frame the workers and their job size. A parallel frame wants
/// a context of its own: its worker pool and job buffers would otherwise
/// stay with every thread that ever compressed a large frame.
void zstd_prepare(ZSTD_CCtx* cctx, int level, std::uint64_t size, int workers);

}  // namespace daskcaps::detail
