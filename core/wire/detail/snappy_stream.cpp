#include "core/wire/detail/snappy_stream.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace daskcaps::detail {

namespace {
Error corrupt() { return make_error(Errc::codec_failed, "snappy block is corrupt"); }

// Bytes after the tag byte that an element's header needs.
std::size_t extra_bytes(std::uint8_t tag) {
  switch (tag & 3) {
    case 0: return (tag >> 2) < 60 ? 0 : (tag >> 2) - 59;
    case 1: return 1;
    case 2: return 2;
    default: return 4;
  }
}

std::uint32_t le(const std::uint8_t* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint32_t{p[i]} << (8 * i);
  return v;
}
}  // namespace

SnappyBlockStream::SnappyBlockStream(std::uint64_t output_bytes, std::size_t window_bytes, const WindowFn& fn)
    : total_(output_bytes), window_(window_bytes), fn_(fn) {
  buf_.resize_uninitialised(kHistory + static_cast<std::size_t>(std::min<std::uint64_t>(window_bytes, output_bytes)));
  limit_ = std::min(buf_.size(), window_);
}

// Hands out the window and keeps its last kHistory bytes at the front.
Status SnappyBlockStream::emit() {
  if (pos_ > from_ && fn_) {
    if (Status s = fn_(ByteSpan(buf_.data() + from_, pos_ - from_)); !s) return s;
  }
  const std::size_t keep = std::min(pos_, kHistory);
  std::memmove(buf_.data(), buf_.data() + pos_ - keep, keep);
  pos_ = from_ = keep;
  limit_ = std::min(buf_.size(), from_ + window_);
  return ok_status();
}

Status SnappyBlockStream::literal(const std::uint8_t* p, std::size_t n) {
  if (n > total_ - made_) return corrupt();
  made_ += n;
  while (n > 0) {
    if (pos_ == limit_) {
      if (Status s = emit(); !s) return s;
    }
    const std::size_t k = std::min(n, limit_ - pos_);
    std::memcpy(buf_.data() + pos_, p, k);
    pos_ += k;
    p += k;
    n -= k;
  }
  return ok_status();
}

Status SnappyBlockStream::copy(std::uint64_t offset, std::uint64_t length) {
  if (offset == 0 || offset > made_ || length > total_ - made_) return corrupt();
  if (offset > kHistory)
    return make_error(Errc::unsupported, "snappy copy reaches " + std::to_string(offset) +
                                             " bytes back, further than the 64 KiB a block decoded in "
                                             "pieces keeps");
  made_ += length;
  while (length > 0) {
    if (pos_ == limit_) {
      if (Status s = emit(); !s) return s;
    }
    // Within the window, and never ahead of what is written: an offset
    // shorter than the length repeats the bytes just made.
    std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(length, limit_ - pos_));
    const std::size_t off = static_cast<std::size_t>(offset);
    std::uint8_t* dst = buf_.data() + pos_;
    const std::uint8_t* src = dst - off;
    if (off >= k) {
      std::memcpy(dst, src, k);
    } else if (off == 1) {
      std::memset(dst, *src, k);
    } else {
      // The pattern of `off` bytes, repeated: each copy doubles what can be
      // copied next without overlap.
      std::size_t done = 0, period = off;
      while (done < k) {
        const std::size_t n = std::min(period, k - done);
        std::memcpy(dst + done, dst + done - period, n);
        done += n;
        if (done >= period * 2) period *= 2;
      }
    }
    pos_ += k;
    length -= k;
  }
  return ok_status();
}

Status SnappyBlockStream::feed(ByteSpan in) {
  const std::uint8_t* p = in.data();
  const std::uint8_t* end = p + in.size();
  while (p < end) {
    if (literal_left_ > 0) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(literal_left_, end - p));
      if (Status s = literal(p, n); !s) return s;
      p += n;
      literal_left_ -= n;
      continue;
    }
    const std::uint8_t* t = nullptr;  // a whole element header: tag, then its bytes
    std::size_t n = 0;
    if (tag_have_ == 0 && end - p >= 5) {
      // The header is in this piece (the usual case): read it in place.
      t = p;
      n = 1 + extra_bytes(*p);
      p += n;
    } else {
      if (tag_have_ == 0) {
        tag_[0] = *p++;
        tag_have_ = 1;
        tag_need_ = 1 + extra_bytes(tag_[0]);
      }
      while (tag_have_ < tag_need_ && tag_have_ < sizeof tag_ && p < end) tag_[tag_have_++] = *p++;
      if (tag_have_ < tag_need_) break;
      t = tag_;
      n = tag_need_;
      tag_have_ = 0;
    }
    if (Status s = element(t, n); !s) return s;
  }
  return ok_status();
}

Status SnappyBlockStream::element(const std::uint8_t* t, std::size_t n) {
  const std::uint8_t tag = t[0];
  switch (tag & 3) {
    case 0:
      literal_left_ = std::uint64_t{(tag >> 2) < 60 ? (tag >> 2) : le(t + 1, n - 1)} + 1;
      if (literal_left_ > total_ - made_) return corrupt();
      return ok_status();
    case 1:
      return copy((static_cast<std::uint64_t>(tag >> 5) << 8) | t[1], 4 + ((tag >> 2) & 7));
    default:
      return copy(le(t + 1, n - 1), (tag >> 2) + 1);
  }
}

Status SnappyBlockStream::finish() {
  if (tag_have_ != 0 || literal_left_ != 0 || made_ != total_) return corrupt();
  if (pos_ > from_ && fn_) return fn_(ByteSpan(buf_.data() + from_, pos_ - from_));
  return ok_status();
}

}  // namespace daskcaps::detail
