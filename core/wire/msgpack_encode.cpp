// Encoding msgpack (core/wire/msgpack.h: encode()): straight into the output
// buffer, grown ahead of each value, in the smallest form of every value as
// Python's packer writes it.
#include <algorithm>
#include <bit>
#include <cstring>

#include "core/wire/detail/msgpack_arena.h"
#include "core/wire/internal/msgpack_stream.h"

namespace daskcaps::msgpack {

// ---------------------------------------------------------------------------
// Encoding: straight into the output buffer, grown ahead of each value.

namespace detail {

class Encoder {
 public:
  /// Appends to `out`; `guess` sizes the first growth of the buffer.
  Encoder(Buffer& out, std::size_t guess) : out_(out), start_(out.size()) {
    out_.resize_uninitialised(start_ + std::max<std::size_t>(guess, 64));
    p_ = out_.data() + start_;
    end_ = out_.data() + out_.size();
  }
  /// Trims the buffer to what was written.
  void finish() { out_.resize_uninitialised(static_cast<std::size_t>(p_ - out_.data())); }

  /// What a decoded root re-encodes to, when nothing changed, plus the most
  /// that need() asks for beyond what is then written (32 for a fixstr of
  /// length 0); 0 when unknown.
  static std::size_t size_guess(const Value& v) {
    return v.arena_ != nullptr && (v.flags_ & Value::kRoot) != 0 ? v.arena_->encoded_size + 32 : 0;
  }

  /// The forms most Dask values take are written here, inline in the
  /// container loops; the others by tagged().
  [[gnu::always_inline]] void value(const Value& v) {
    if (v.type_ == Type::str && v.size_ <= 31) {
      need(32);
      *p_++ = static_cast<std::uint8_t>(0xa0 | v.size_);
      small_copy(v.as_str().data(), v.size_);
      return;
    }
    if (v.type_ == Type::int_ && (v.flags_ & Value::kNegative) == 0 && v.p_.u <= 0x7f) {
      need(1);
      *p_++ = static_cast<std::uint8_t>(v.p_.u);
      return;
    }
    tagged(v);
  }

 private:
  [[gnu::noinline]] void tagged(const Value& v) {
    need(9);
    switch (v.type()) {
      case Type::nil: *p_++ = 0xc0; return;
      case Type::boolean: *p_++ = v.as_bool() ? 0xc3 : 0xc2; return;
      case Type::int_: integer(v.as_int()); return;
      case Type::float32:
        *p_++ = 0xca;
        be32(std::bit_cast<std::uint32_t>(v.as_float32()));
        return;
      case Type::float64:
        *p_++ = 0xcb;
        be64(std::bit_cast<std::uint64_t>(v.as_double()));
        return;
      case Type::str: {
        const std::string_view s = v.as_str();
        need(5 + s.size());
        const std::size_t n = s.size();
        if (n <= 31) {
          *p_++ = static_cast<std::uint8_t>(0xa0 | n);
        } else {
          length(n, 0xd9, 0xda, 0xdb);
        }
        copy(s.data(), n);
        return;
      }
      case Type::bin: {
        const ByteSpan b = v.as_bin();
        need(5 + b.size());
        length(b.size(), 0xc4, 0xc5, 0xc6);
        copy(b.data(), b.size());
        return;
      }
      case Type::ext: {
        const Ext e = v.as_ext();
        need(6 + e.data.size());
        ext_header(e.data.size());
        *p_++ = static_cast<std::uint8_t>(e.type);
        copy(e.data.data(), e.data.size());
        return;
      }
      case Type::array: {
        const auto items = v.as_array();
        const std::size_t n = items.size();
        if (n <= 15) {
          *p_++ = static_cast<std::uint8_t>(0x90 | n);
        } else {
          length(n, 0, 0xdc, 0xdd);
        }
        for (const Value& e : items) value(e);
        return;
      }
      case Type::map: {
        const auto entries = v.as_map();
        const std::size_t n = entries.size();
        if (n <= 15) {
          *p_++ = static_cast<std::uint8_t>(0x80 | n);
        } else {
          length(n, 0, 0xde, 0xdf);
        }
        for (const Entry& e : entries) {
          value(e.first);
          value(e.second);
        }
        return;
      }
    }
  }

  void need(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) [[unlikely]]
      grow(n);
  }
  void grow(std::size_t n) {
    const std::size_t used = static_cast<std::size_t>(p_ - out_.data());
    out_.resize_uninitialised(std::max(out_.size() * 2, used + n));
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }
  /// n <= 31 bytes without a call: two overlapping moves of the widest
  /// power of two that fits.
  void small_copy(const char* src, std::size_t n) {
    auto* s = reinterpret_cast<const std::uint8_t*>(src);
    if (n >= 16) {
      std::memcpy(p_, s, 16);
      std::memcpy(p_ + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
      std::memcpy(p_, s, 8);
      std::memcpy(p_ + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(p_, s, 4);
      std::memcpy(p_ + n - 4, s + n - 4, 4);
    } else {
      for (std::size_t i = 0; i < n; ++i) p_[i] = s[i];
    }
    p_ += n;
  }
  void copy(const void* src, std::size_t n) {
    if (n != 0) std::memcpy(p_, src, n);
    p_ += n;
  }
  void be16(std::uint16_t v) {
    p_[0] = static_cast<std::uint8_t>(v >> 8);
    p_[1] = static_cast<std::uint8_t>(v);
    p_ += 2;
  }
  void be32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p_[i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
    p_ += 4;
  }
  void be64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) p_[i] = static_cast<std::uint8_t>(v >> (56 - 8 * i));
    p_ += 8;
  }
  // A length in its 8-, 16- or 32-bit form (tag8 0: no 8-bit form).
  void length(std::size_t n, std::uint8_t tag8, std::uint8_t tag16, std::uint8_t tag32) {
    if (n <= 0xff && tag8 != 0) {
      *p_++ = tag8;
      *p_++ = static_cast<std::uint8_t>(n);
    } else if (n <= 0xffff) {
      *p_++ = tag16;
      be16(static_cast<std::uint16_t>(n));
    } else {
      *p_++ = tag32;
      be32(static_cast<std::uint32_t>(n));
    }
  }
  void ext_header(std::size_t n) {
    switch (n) {
      case 1: *p_++ = 0xd4; return;
      case 2: *p_++ = 0xd5; return;
      case 4: *p_++ = 0xd6; return;
      case 8: *p_++ = 0xd7; return;
      case 16: *p_++ = 0xd8; return;
      default: length(n, 0xc7, 0xc8, 0xc9);
    }
  }
  void integer(const Int& v) {
    if (!v.negative) {
      const std::uint64_t u = v.u;
      if (u <= 0x7f) {
        *p_++ = static_cast<std::uint8_t>(u);
      } else if (u <= 0xff) {
        *p_++ = 0xcc;
        *p_++ = static_cast<std::uint8_t>(u);
      } else if (u <= 0xffff) {
        *p_++ = 0xcd;
        be16(static_cast<std::uint16_t>(u));
      } else if (u <= 0xffffffffu) {
        *p_++ = 0xce;
        be32(static_cast<std::uint32_t>(u));
      } else {
        *p_++ = 0xcf;
        be64(u);
      }
      return;
    }
    const std::int64_t i = v.i;
    if (i >= -32) {
      *p_++ = static_cast<std::uint8_t>(i);
    } else if (i >= INT8_MIN) {
      *p_++ = 0xd0;
      *p_++ = static_cast<std::uint8_t>(i);
    } else if (i >= INT16_MIN) {
      *p_++ = 0xd1;
      be16(static_cast<std::uint16_t>(i));
    } else if (i >= INT32_MIN) {
      *p_++ = 0xd2;
      be32(static_cast<std::uint32_t>(i));
    } else {
      *p_++ = 0xd3;
      be64(static_cast<std::uint64_t>(i));
    }
  }

  Buffer& out_;
  std::size_t start_;
  std::uint8_t* p_;
  std::uint8_t* end_;
};

}  // namespace detail

void encode(const Value& v, ByteWriter& out) {
  detail::Encoder e(out.buffer(), detail::Encoder::size_guess(v));
  e.value(v);
  e.finish();
}

Buffer encode(const Value& value) {
  Buffer out;
  detail::Encoder e(out, detail::Encoder::size_guess(value));
  e.value(value);
  e.finish();
  return out;
}

}  // namespace daskcaps::msgpack
