#include "core/wire/internal/frame_encoder.h"

#include <lz4.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/wire/detail/codec_contexts.h"

namespace daskcaps {

namespace {

Error fed_too_much(std::uint64_t size) {
  return make_error(Errc::internal, "frame encoder fed more than the " + std::to_string(size) + " bytes it was started for");
}
Error fed_too_little(std::uint64_t fed, std::uint64_t size) {
  return make_error(Errc::internal, "frame encoder finished after " + std::to_string(fed) + " of " +
                                        std::to_string(size) + " bytes");
}

// Writes an lz4 length: 15 in the token is followed by bytes of 255 and one
// below it.
void put_lz4_length(Buffer& out, std::uint64_t n) {
  while (n >= 255) {
    out.push_back(255);
    n -= 255;
  }
  out.push_back(static_cast<std::uint8_t>(n));
}

// ---- lz4 -------------------------------------------------------------------

constexpr std::size_t kLz4Dict = std::size_t{64} << 10;  // a match reaches back at most 65535 bytes

class Lz4Encoder final : public FrameEncoder {
 public:
  Lz4Encoder(std::uint64_t size, std::uint64_t abandon) : size_(size), abandon_(abandon) {
    chunk_.resize_uninitialised(static_cast<std::size_t>(std::min<std::uint64_t>(size, kLz4ChunkBytes)));
    if (size_ > kLz4ChunkBytes) {
      stream_ = LZ4_createStream();
      dict_.resize_uninitialised(kLz4Dict);
      block_.resize_uninitialised(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(kLz4ChunkBytes))));
    }
  }
  ~Lz4Encoder() override {
    if (stream_ != nullptr) LZ4_freeStream(stream_);
  }

  Status feed(ByteSpan in, ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder fed after finish()");
    if (in.size() > size_ - fed_) return fed_too_much(size_);
    fed_ += in.size();
    if (abandoned_) return ok_status();
    while (!in.empty()) {
      const std::size_t k = std::min(in.size(), chunk_.size() - used_);
      std::memcpy(chunk_.data() + used_, in.data(), k);
      used_ += k;
      in = in.subspan(k);
      if (used_ == chunk_.size() && size_ > kLz4ChunkBytes) {
        if (Status s = compress_chunk(out); !s) return s;
        if (abandoned_) return ok_status();
      }
    }
    return ok_status();
  }

  Status finish(ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder finished twice");
    if (fed_ < size_) return fed_too_little(fed_, size_);
    finished_ = true;
    if (abandoned_) return ok_status();
    if (size_ <= kLz4ChunkBytes) return whole(out);
    if (used_ > 0) {
      if (Status s = compress_chunk(out); !s) return s;
      if (abandoned_) return ok_status();
    }
    // The block ends with the run in progress, a sequence without a match.
    Buffer tail;
    const std::uint64_t run = pending_.size();
    tail.push_back(static_cast<std::uint8_t>(std::min<std::uint64_t>(run, 15) << 4));
    if (run >= 15) put_lz4_length(tail, run - 15);
    tail.append(pending_.data(), pending_.size());
    return put(out, tail);
  }

  std::uint64_t longest_literal_run() const override { return longest_; }
  bool abandoned() const override { return abandoned_; }

 private:
  Status prefix(ByteSink& out) {
    std::uint8_t p[4];
    for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(size_ >> (8 * i));
    return put(out, ByteSpan(p, 4));
  }

  // A frame of one chunk: liblz4's own block, as python-lz4 writes it.
  Status whole(ByteSink& out) {
    const int bound = LZ4_compressBound(static_cast<int>(size_));
    Buffer block = Buffer::uninitialised(4 + static_cast<std::size_t>(bound));
    for (int i = 0; i < 4; ++i) block[i] = static_cast<std::uint8_t>(size_ >> (8 * i));
    const int written = LZ4_compress_default(reinterpret_cast<const char*>(chunk_.data()),
                                             reinterpret_cast<char*>(block.data() + 4), static_cast<int>(size_),
                                             bound);
    if (written <= 0 && size_ > 0) return make_error(Errc::codec_failed, "lz4 compression failed");
    block.resize_uninitialised(4 + static_cast<std::size_t>(std::max(written, 0)));
    longest_ = longest_run(ByteSpan(block.data() + 4, block.size() - 4));
    return put(out, block);
  }

  // The longest literal run of a whole block.
  static std::uint64_t longest_run(ByteSpan b) {
    std::uint64_t longest = 0;
    std::size_t p = 0;
    while (p < b.size()) {
      const std::uint8_t token = b[p++];
      std::uint64_t lit = token >> 4;
      if (lit == 15) {
        std::uint8_t x = 0;
        do {
          x = b[p++];
          lit += x;
        } while (x == 255 && p < b.size());
      }
      longest = std::max(longest, lit);
      p += static_cast<std::size_t>(lit);
      if (p >= b.size()) break;
      p += 2;
      if ((token & 15) == 15) {
        std::uint8_t x = 0;
        do {
          x = b[p++];
        } while (x == 255 && p < b.size());
      }
    }
    return longest;
  }

  // Compresses the chunk against the 64 KiB before it and writes its
  // sequences but the last, whose literals start the run in progress.
  Status compress_chunk(ByteSink& out) {
    const int n = static_cast<int>(used_);
    const int w = LZ4_compress_fast_continue(stream_, reinterpret_cast<const char*>(chunk_.data()),
                                             reinterpret_cast<char*>(block_.data()), n,
                                             static_cast<int>(block_.size()), 1);
    if (w <= 0) return make_error(Errc::codec_failed, "lz4 compression failed");
    // The next chunk overwrites this one: the dictionary moves aside.
    LZ4_saveDict(stream_, reinterpret_cast<char*>(dict_.data()), static_cast<int>(kLz4Dict));
    used_ = 0;
    if (!prefix_written_) {
      if (Status s = prefix(out); !s) return s;
      prefix_written_ = true;
    }
    const std::uint8_t* b = block_.data();
    const std::size_t size = static_cast<std::size_t>(w);
    // The first sequence: its token and literals.
    std::size_t p = 0;
    const std::uint8_t token = b[p++];
    std::uint64_t lit = token >> 4;
    if (lit == 15) {
      std::uint8_t x = 0;
      do {
        x = b[p++];
        lit += x;
      } while (x == 255);
    }
    const std::size_t first_literals = p;
    p += static_cast<std::size_t>(lit);
    if (p >= size) {
      // No match in the whole chunk: its literals only extend the run.
      return extend_run(b + first_literals, static_cast<std::size_t>(lit));
    }
    // The run in progress and the first literals become one run.
    const std::uint64_t run = pending_.size() + lit;
    if (run > abandon_) return extend_run(b + first_literals, static_cast<std::size_t>(lit));
    longest_ = std::max(longest_, run);
    Buffer head;
    head.push_back(static_cast<std::uint8_t>((std::min<std::uint64_t>(run, 15) << 4) | (token & 15)));
    if (run >= 15) put_lz4_length(head, run - 15);
    head.append(pending_.data(), pending_.size());
    head.append(b + first_literals, static_cast<std::size_t>(lit));
    if (Status s = put(out, head); !s) return s;
    pending_.clear();
    // Then every sequence up to the last, as they are.
    const std::size_t middle = p;
    // Walk: from `middle`, each step is a match (offset + length bytes)
    // then the next sequence's token and literals.
    p = middle;
    std::uint8_t match_token = token;
    std::size_t last_token = 0;
    std::uint64_t last_lit = 0;
    std::size_t last_literals = 0;
    for (;;) {
      p += 2;  // offset
      if ((match_token & 15) == 15) {
        std::uint8_t x = 0;
        do {
          x = b[p++];
        } while (x == 255);
      }
      // The next sequence.
      last_token = p;
      match_token = b[p++];
      std::uint64_t l = match_token >> 4;
      if (l == 15) {
        std::uint8_t x = 0;
        do {
          x = b[p++];
          l += x;
        } while (x == 255);
      }
      last_literals = p;
      last_lit = l;
      p += static_cast<std::size_t>(l);
      if (p >= size) break;
      longest_ = std::max(longest_, l);
    }
    if (Status s = put(out, ByteSpan(b + middle, last_token - middle)); !s) return s;
    return extend_run(b + last_literals, static_cast<std::size_t>(last_lit));
  }

  Status extend_run(const std::uint8_t* p, std::size_t n) {
    if (pending_.size() + n > abandon_) {
      abandoned_ = true;
      longest_ = std::max<std::uint64_t>(longest_, pending_.size() + n);
      Buffer().swap(pending_);
      Buffer().swap(chunk_);
      return ok_status();
    }
    pending_.append(p, n);
    longest_ = std::max<std::uint64_t>(longest_, pending_.size());
    return ok_status();
  }

  std::uint64_t size_;
  std::uint64_t abandon_;
  std::uint64_t fed_ = 0;
  Buffer chunk_;
  std::size_t used_ = 0;
  LZ4_stream_t* stream_ = nullptr;
  Buffer dict_;
  Buffer block_;
  Buffer pending_;  // the literal run in progress
  std::uint64_t longest_ = 0;
  bool prefix_written_ = false;
  bool abandoned_ = false;
  bool finished_ = false;
};

// ---- zstd ------------------------------------------------------------------

class ZstdEncoder final : public FrameEncoder {
 public:
  // A parallel frame's context has its own workers: not kept.
  ZstdEncoder(std::uint64_t size, ZSTD_CCtx* cctx, bool kept) : size_(size), cctx_(cctx), kept_(kept) {
    out_.resize_uninitialised(ZSTD_CStreamOutSize());
  }
  ~ZstdEncoder() override {
    if (kept_)
      detail::give_back_stream_cctx(cctx_);
    else
      ZSTD_freeCCtx(cctx_);
  }

  Status feed(ByteSpan in, ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder fed after finish()");
    if (in.size() > size_ - fed_) return fed_too_much(size_);
    fed_ += in.size();
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    while (input.pos < input.size) {
      ZSTD_outBuffer output{out_.data(), out_.size(), 0};
      const std::size_t r = ZSTD_compressStream2(cctx_, &output, &input, ZSTD_e_continue);
      if (ZSTD_isError(r)) return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(r));
      if (Status s = put(out, ByteSpan(out_.data(), output.pos)); !s) return s;
    }
    return ok_status();
  }

  Status finish(ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder finished twice");
    if (fed_ < size_) return fed_too_little(fed_, size_);
    finished_ = true;
    ZSTD_inBuffer input{nullptr, 0, 0};
    for (;;) {
      ZSTD_outBuffer output{out_.data(), out_.size(), 0};
      const std::size_t r = ZSTD_compressStream2(cctx_, &output, &input, ZSTD_e_end);
      if (ZSTD_isError(r)) return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(r));
      if (Status s = put(out, ByteSpan(out_.data(), output.pos)); !s) return s;
      if (r == 0) return ok_status();
    }
  }

 private:
  std::uint64_t size_;
  std::uint64_t fed_ = 0;
  ZSTD_CCtx* cctx_;
  bool kept_;
  Buffer out_;
  bool finished_ = false;
};

// ---- snappy ----------------------------------------------------------------

constexpr std::size_t kSnappyFragment = std::size_t{64} << 10;  // snappy's kBlockSize

class SnappyEncoder final : public FrameEncoder {
 public:
  explicit SnappyEncoder(std::uint64_t size) : size_(size) {
    fragment_.resize_uninitialised(static_cast<std::size_t>(std::min<std::uint64_t>(size, kSnappyFragment)));
    packed_.resize_uninitialised(snappy::MaxCompressedLength(kSnappyFragment));
  }

  Status feed(ByteSpan in, ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder fed after finish()");
    if (in.size() > size_ - fed_) return fed_too_much(size_);
    fed_ += in.size();
    if (Status s = start(out); !s) return s;
    while (!in.empty()) {
      const std::size_t k = std::min(in.size(), fragment_.size() - used_);
      std::memcpy(fragment_.data() + used_, in.data(), k);
      used_ += k;
      in = in.subspan(k);
      if (used_ == fragment_.size()) {
        if (Status s = flush(out); !s) return s;
      }
    }
    return ok_status();
  }

  Status finish(ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder finished twice");
    if (fed_ < size_) return fed_too_little(fed_, size_);
    finished_ = true;
    if (Status s = start(out); !s) return s;
    return used_ > 0 ? flush(out) : ok_status();
  }

 private:
  // The varint of the whole size, once.
  Status start(ByteSink& out) {
    if (started_) return ok_status();
    started_ = true;
    std::uint8_t v[10];
    std::size_t n = 0;
    std::uint64_t x = size_;
    while (x >= 128) {
      v[n++] = static_cast<std::uint8_t>(x | 128);
      x >>= 7;
    }
    v[n++] = static_cast<std::uint8_t>(x);
    return put(out, ByteSpan(v, n));
  }

  // One fragment compressed alone, without the varint snappy puts first.
  Status flush(ByteSink& out) {
    std::size_t len = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(fragment_.data()), used_,
                        reinterpret_cast<char*>(packed_.data()), &len);
    std::size_t varint = 0;
    while (varint < len && (packed_[varint] & 0x80) != 0) ++varint;
    ++varint;
    used_ = 0;
    return put(out, ByteSpan(packed_.data() + varint, len - std::min(len, varint)));
  }

  std::uint64_t size_;
  std::uint64_t fed_ = 0;
  Buffer fragment_;
  std::size_t used_ = 0;
  Buffer packed_;
  bool started_ = false;
  bool finished_ = false;
};

// ---- zlib ------------------------------------------------------------------

class ZlibEncoder final : public FrameEncoder {
 public:
  explicit ZlibEncoder(std::uint64_t size) : size_(size) { out_.resize_uninitialised(std::size_t{64} << 10); }
  ~ZlibEncoder() override {
    if (ready_) deflateEnd(&zs_);
  }
  Status init(int level) {
    if (deflateInit(&zs_, level) != Z_OK) return make_error(Errc::codec_failed, "zlib: cannot initialise");
    ready_ = true;
    return ok_status();
  }

  Status feed(ByteSpan in, ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder fed after finish()");
    if (in.size() > size_ - fed_) return fed_too_much(size_);
    fed_ += in.size();
    while (!in.empty()) {
      const std::size_t step = std::min<std::size_t>(in.size(), std::size_t{1} << 30);
      zs_.next_in = const_cast<Bytef*>(in.data());
      zs_.avail_in = static_cast<uInt>(step);
      in = in.subspan(step);
      if (Status s = run(Z_NO_FLUSH, out); !s) return s;
    }
    return ok_status();
  }

  Status finish(ByteSink& out) override {
    if (finished_) return make_error(Errc::internal, "frame encoder finished twice");
    if (fed_ < size_) return fed_too_little(fed_, size_);
    finished_ = true;
    zs_.next_in = nullptr;
    zs_.avail_in = 0;
    return run(Z_FINISH, out);
  }

 private:
  Status run(int flush, ByteSink& out) {
    for (;;) {
      zs_.next_out = out_.data();
      zs_.avail_out = static_cast<uInt>(out_.size());
      const int rc = deflate(&zs_, flush);
      if (rc == Z_STREAM_ERROR) return make_error(Errc::codec_failed, "zlib compression failed");
      if (Status s = put(out, ByteSpan(out_.data(), out_.size() - zs_.avail_out)); !s) return s;
      if (flush == Z_FINISH ? rc == Z_STREAM_END : (zs_.avail_in == 0 && zs_.avail_out != 0)) return ok_status();
    }
  }

  std::uint64_t size_;
  std::uint64_t fed_ = 0;
  z_stream zs_{};
  Buffer out_;
  bool ready_ = false;
  bool finished_ = false;
};

}  // namespace

Result<std::unique_ptr<FrameEncoder>> FrameEncoder::start(Codec c, std::uint64_t size, const Options& options) {
  switch (c) {
    case Codec::none:
      return make_error(Errc::usage, "no encoder for raw frames");
    case Codec::lz4:
      if (size > static_cast<std::uint64_t>(LZ4_MAX_INPUT_SIZE))
        return make_error(Errc::unsupported, "lz4 cannot compress " + std::to_string(size) + " bytes in one block");
      return std::unique_ptr<FrameEncoder>(new Lz4Encoder(size, options.abandon_literal_run));
    case Codec::zstd: {
      const bool parallel = detail::zstd_parallel(size, options.compress.zstd_workers);
      ZSTD_CCtx* cctx = parallel ? ZSTD_createCCtx() : detail::take_stream_cctx();
      if (cctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");
      detail::zstd_prepare(cctx, options.compress.zstd_level, size, options.compress.zstd_workers);
      return std::unique_ptr<FrameEncoder>(new ZstdEncoder(size, cctx, !parallel));
    }
    case Codec::snappy:
      return std::unique_ptr<FrameEncoder>(new SnappyEncoder(size));
    case Codec::zlib: {
      auto z = std::make_unique<ZlibEncoder>(size);
      if (Status s = z->init(options.compress.zlib_level); !s) return std::move(s).error();
      return std::unique_ptr<FrameEncoder>(std::move(z));
    }
  }
  return make_error(Errc::internal, "unknown codec");
}

}  // namespace daskcaps
