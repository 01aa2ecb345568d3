#include "core/wire/detail/lz4_block_stream.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace daskcaps::detail {

namespace {

using Kind = Lz4BlockStream::Kind;

// ---- liblz4's decisions -----------------------------------------------------
// LZ4_decompress_generic (lib/lz4.c of 1.9.4) checks a sequence against the
// ends of the block (I) and of the output (N) at a few points, and which
// checks it makes depends on the path that reads the sequence:
//   fast      its fast loop, while more than 64 bytes of output are left
//             (FASTLOOP_SAFE_DISTANCE): a sequence that comes near an end
//             leaves it, for good, for the safe loop's checks;
//   shortcut  the safe loop's shortcut, for a literal length below 15 with
//             16 bytes of input and 32 of output left: a match of length
//             below 19 at an offset of 8 or more is then copied without the
//             end-of-output check;
//   safe      the rest of the safe loop.
// The functions below are those checks, on block and output offsets
// (ipa, opa) as liblz4 has its pointers at each one; the decoder calls them
// at the same points whatever the pieces are.
// FASTLOOP_SAFE_DISTANCE: the fast loop runs while this much output is left.
constexpr std::int64_t kFastLoopOutput = 64;
// MFLIMIT: the last match starts at least 12 bytes before the end.
constexpr std::int64_t kMatchStartLimit = 12;
// LASTLITERALS: the last 5 bytes are literals.
constexpr std::int64_t kLastLiterals = 5;
constexpr std::int64_t kMinMatch = 4;

// The path of a sequence whose token is followed by block offset ipa.
[[gnu::always_inline]] inline Kind token_kind(bool fast_mode, unsigned literal_nibble,
                                              std::int64_t ipa, std::int64_t opa,
                                              std::int64_t block, std::int64_t output) {
  if (fast_mode) return Kind::fast;
  if (literal_nibble != 15 && ipa < block - 16 && opa <= output - 32) return Kind::shortcut;
  return Kind::safe;
}

enum class Literals : std::uint8_t { copy, last, bad_end };
struct LiteralVerdict {
  Literals what;
  Kind kind;  // the path the rest of the sequence takes
};

// Literals of length `length` that start at block offset ipa and output
// offset opa. A run that comes within 12 bytes of the output's end or 8 of
// the block's (the least a further sequence takes) must end the block,
// exactly, without passing the output's end.
[[gnu::always_inline]] inline LiteralVerdict literal_verdict(Kind kind, unsigned literal_nibble,
                                                             std::uint64_t length, std::int64_t ipa,
                                                             std::int64_t opa, std::int64_t block,
                                                             std::int64_t output) {
  const auto len = static_cast<std::int64_t>(length);  // < 2^40: 255 per block byte
  switch (kind) {
    case Kind::shortcut:
      return {Literals::copy, Kind::shortcut};
    case Kind::fast:
      if (literal_nibble == 15) {
        if (opa + len <= output - 32 && ipa + len <= block - 32)
          return {Literals::copy, Kind::fast};
      } else if (ipa <= block - 17) {
        return {Literals::copy, Kind::fast};
      }
      break;  // to the safe loop's literal copy
    case Kind::safe:
      break;
  }
  if (opa + len > output - kMatchStartLimit || ipa + len > block - 8) {
    if (ipa + len != block || opa + len > output) return {Literals::bad_end, Kind::safe};
    return {Literals::last, Kind::safe};
  }
  return {Literals::copy, Kind::safe};
}

enum class Match : std::uint8_t { copy, before_start, zero_offset, bad_end };
struct MatchVerdict {
  Match what;
  bool fast;  // liblz4 stays in its fast loop
};

// A match of `length` bytes (4 included) at `offset`, starting at output
// offset opa. The offset may not reach before the output's first byte, and
// the match must end 5 bytes before the output's end, except on the
// shortcut's unchecked copy; liblz4 takes an offset of 0, we do not.
[[gnu::always_inline]] inline MatchVerdict match_verdict(Kind kind, unsigned match_nibble,
                                                         std::uint64_t length, std::uint32_t offset,
                                                         std::int64_t opa, std::int64_t output) {
  const auto len = static_cast<std::int64_t>(length);
  const bool before_start = offset > opa;
  switch (kind) {
    case Kind::fast:
      if (opa + len < output - kFastLoopOutput) {
        if (before_start) return {Match::before_start, false};
        return {offset == 0 ? Match::zero_offset : Match::copy, true};
      }
      break;  // to the safe loop's match copy
    case Kind::shortcut:
      if (match_nibble != 15 && offset >= 8 && !before_start) return {Match::copy, false};
      break;
    case Kind::safe:
      break;
  }
  if (before_start) return {Match::before_start, false};
  if (opa + len > output - kLastLiterals) return {Match::bad_end, false};
  return {offset == 0 ? Match::zero_offset : Match::copy, false};
}

// ---- copies -----------------------------------------------------------------
// A match copy reads output `offset` bytes back, which overlaps what it
// writes when the offset is below the length: the bytes repeat with that
// period.

// Exactly n bytes. Copies from the match's start in chunks that double, so
// that each chunk's source is final (the distance stays a multiple of the
// offset).
void copy_match_exact(std::uint8_t* d, std::size_t offset, std::size_t n) {
  if (offset >= n) {
    std::memcpy(d, d - offset, n);
    return;
  }
  std::size_t distance = offset;
  while (n > 0) {
    const std::size_t k = std::min(n, distance);
    std::memcpy(d, d - distance, k);
    d += k;
    n -= k;
    distance += k;
  }
}

// n bytes, writing up to 16 bytes past them (the caller has the room).
// Short matches go in 8-byte pieces, as liblz4 copies them: a 16-byte load
// that straddles two recent stores waits for both (no store forwarding).
inline void copy_match_wild(std::uint8_t* d, std::size_t offset, std::size_t n) {
  const std::uint8_t* s = d - offset;
  if (offset >= 8) {
    std::memcpy(d, s, 8);
    std::memcpy(d + 8, s + 8, 8);
    if (n <= 16) return;
    if (offset >= 16) {
      if (offset >= n) {
        std::memcpy(d + 16, s + 16, n - 16);
        return;
      }
      for (std::size_t i = 16; i < n; i += 16) std::memcpy(d + i, s + i, 16);
      return;
    }
    for (std::size_t i = 16; i < n; i += 8) std::memcpy(d + i, s + i, 8);
    return;
  }
  if (offset == 1) {
    std::memset(d, *s, n);
    return;
  }
  // 2-7: the first 8 bytes one by one (each reads one written before it),
  // then 8 at a time from a multiple of the offset that is at least 8 back.
  static constexpr std::uint8_t kDistance[8] = {0, 8, 8, 9, 8, 10, 12, 14};
  for (std::size_t i = 0; i < 8; ++i) d[i] = s[i];
  const std::size_t distance = kDistance[offset];
  for (std::size_t i = 8; i < n; i += 8) std::memcpy(d + i, d + i - distance, 8);
}

// The fast loop runs while a whole sequence of usual size fits: this much
// input, and room for its output plus the wild copies' overrun.
constexpr std::ptrdiff_t kFastInput = 32;
constexpr std::ptrdiff_t kFastRoom = 64;
constexpr std::uint64_t kWildSlack = 32;

constexpr std::size_t kHistory = std::size_t{64} << 10;  // matches reach back at most 65535 bytes

}  // namespace

Lz4BlockStream::Lz4BlockStream(std::uint64_t block_bytes, std::uint64_t output_bytes,
                               std::size_t piece_bytes)
    : block_(static_cast<std::int64_t>(block_bytes)),
      output_(static_cast<std::int64_t>(output_bytes)),
      window_(output_bytes, piece_bytes, kHistory),
      fast_mode_(output_ >= kFastLoopOutput) {}

Lz4BlockStream::~Lz4BlockStream() = default;

Error Lz4BlockStream::error(std::string what) const {
  return make_error(Errc::codec_failed, "lz4 " + std::move(what),
                    static_cast<std::uint64_t>(sequence_at_));
}

Status Lz4BlockStream::next_window(std::vector<Bytes>& out) {
  if (window_.next(out)) return drain_ ? drain_(out) : ok_status();
  return error("block makes more than the " + std::to_string(output_) + " bytes its prefix says");
}

Status Lz4BlockStream::feed(ByteSpan in, std::vector<Bytes>& out) {
  if (in.empty()) return ok_status();
  chunk_ = in.data();
  chunk_pos_ = consumed_;
  consumed_ += static_cast<std::int64_t>(in.size());
  Status s = output_ == 0 ? Status() : run(in.data(), in.data() + in.size(), out);
  if (output_ == 0) {
    // liblz4 decodes an empty output from the block 00 alone.
    sequence_at_ = chunk_pos_;
    if (block_ != 1 || in[0] != 0) s = error("block of an empty frame must be the one byte 00");
    state_ = State::end;
  }
  window_.hand_out(out);
  return s;
}

Status Lz4BlockStream::finish(std::vector<Bytes>& out) {
  window_.hand_out(out);
  if (state_ == State::end) return ok_status();
  sequence_at_ = consumed_;
  if (consumed_ == 0) return error("block is empty");
  return error("block ends inside a sequence (" + std::to_string(window_.written()) + " of " +
               std::to_string(output_) + " bytes made)");
}

Status Lz4BlockStream::decide_literals(std::int64_t ipa) {
  const LiteralVerdict v =
      literal_verdict(kind_, token_ >> 4, literal_length_, ipa,
                      static_cast<std::int64_t>(window_.written()), block_, output_);
  kind_ = v.kind;
  const std::int64_t end = static_cast<std::int64_t>(window_.written() + literal_length_);
  if (v.what == Literals::bad_end && end > output_)
    return error("block makes more than the " + std::to_string(output_) + " bytes its prefix says");
  if (v.what == Literals::bad_end)
    return error("literal run of " + std::to_string(literal_length_) +
                 " bytes that leaves no room for a match (12 bytes of output, 8 of the block) "
                 "does not end the block");
  if (v.what == Literals::last && end != output_)
    return error("block decoded to " + std::to_string(end) + " bytes, its prefix says " +
                 std::to_string(output_));
  literals_left_ = literal_length_;
  last_ = v.what == Literals::last;
  state_ = State::literals;
  return ok_status();
}

Status Lz4BlockStream::decide_match() {
  match_length_ += kMinMatch;
  const std::int64_t opa = static_cast<std::int64_t>(window_.written());
  const MatchVerdict v = match_verdict(kind_, token_ & 15, match_length_, offset_, opa, output_);
  switch (v.what) {
    case Match::copy:
      break;
    case Match::before_start:
      return error("match offset " + std::to_string(offset_) +
                   " reaches before the frame's first output byte (" + std::to_string(opa) +
                   " bytes made)");
    case Match::zero_offset:
      return error("match offset 0 is invalid");
    case Match::bad_end:
      return error("match of " + std::to_string(match_length_) + " bytes at output byte " +
                   std::to_string(opa) + " ends within the last 5 bytes of the " +
                   std::to_string(output_) + " (they must be literals)");
  }
  fast_mode_ = v.fast;
  match_left_ = match_length_;
  state_ = State::match;
  return ok_status();
}

// Whole sequences that are all in the piece and fit in the window, without
// a state per field; anything else (a sequence across pieces or windows,
// the last literals) is left to run()'s state machine, from its token.
void Lz4BlockStream::fast_loop(const std::uint8_t*& ip, const std::uint8_t* iend) {
  if (fast_mode_) fast_mode_loop(ip, iend);
  if (!fast_mode_) safe_mode_loop(ip, iend);
}

// While liblz4 is in its fast loop (all of a block but its last bytes):
// token_kind, literal_verdict and match_verdict for Kind::fast reduce to a
// few comparisons, most of them implied by the room this loop asks for. A
// sequence that would leave liblz4's fast loop goes to run().
void Lz4BlockStream::fast_mode_loop(const std::uint8_t*& ip_ref, const std::uint8_t* iend) {
  // Everything in locals: the copies write through uint8_t pointers, which
  // may alias any member, so the compiler would reload members after each.
  const std::uint8_t* ip = ip_ref;
  std::uint8_t* op = window_.cursor();
  std::uint8_t* const oend = window_.end();
  const std::uint8_t* const in0 = chunk_;
  // Block offsets as offsets from in0: a literal run of 15 or more must end
  // 32 bytes before the block's end, a match length 4 before it.
  const std::int64_t long_literals_end = block_ - 32 - chunk_pos_;
  const std::int64_t match_length_end = block_ - 4 - chunk_pos_;
  // Bytes made before out0: with op - out0, how far back a match may reach.
  const std::int64_t made_before = static_cast<std::int64_t>(window_.written());
  std::uint8_t* const out0 = op;
  // The fast loop's own conditions hold by these margins: 32 bytes of the
  // piece after the token leave 17 of the block after it (the piece ends
  // at the block's end at the latest), and room for the sequence plus 65
  // bytes leaves its match more than 64 bytes before the output's end (the
  // window ends at the output's end at the latest).
  constexpr std::uint64_t kRoomAfter = kFastLoopOutput + 1;
  static_assert(kRoomAfter >= kWildSlack, "the wild copies need the room too");
  while (iend - ip >= kFastInput && oend - op >= kFastRoom) {
    const std::uint8_t* p = ip;
    const unsigned token = *p++;
    std::uint64_t lit = token >> 4;
    unsigned s = 0;
    if (lit == 15) {
      do {
        if (p == iend) goto stop;
        s = *p++;
        lit += s;
      } while (s == 255);
    }
    const std::uint8_t* const lit_src = p;
    if (static_cast<std::uint64_t>(iend - p) < lit + 2)
      break;  // not all here, or the last literals
    p += lit;
    if ((token >> 4) == 15 && p - in0 > long_literals_end) break;
    const std::uint32_t offset =
        static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8);
    p += 2;
    std::uint64_t mlen = token & 15;
    if (mlen == 15) {
      do {
        if (p == iend) goto stop;
        s = *p++;
        mlen += s;
      } while (s == 255);
      if (p - in0 > match_length_end) break;
    }
    mlen += kMinMatch;
    if (static_cast<std::uint64_t>(oend - op) < lit + mlen + kRoomAfter) break;
    // 1 <= offset <= bytes made before the match (0 wraps round).
    if (static_cast<std::uint64_t>(offset) - 1 >=
        static_cast<std::uint64_t>(made_before + (op - out0) + static_cast<std::int64_t>(lit)))
      break;

    if ((token >> 4) != 15) {
      std::memcpy(op, lit_src, 16);
    } else {
      std::memcpy(op, lit_src, lit);
    }
    op += lit;
    copy_match_wild(op, offset, mlen);
    op += mlen;
    ip = p;
  }
stop:
  ip_ref = ip;
  window_.set_cursor(op);
}

// The last bytes of a block, after liblz4 left its fast loop: the whole
// rule, sequence by sequence.
void Lz4BlockStream::safe_mode_loop(const std::uint8_t*& ip_ref, const std::uint8_t* iend) {
  const std::uint8_t* ip = ip_ref;
  std::uint8_t* op = window_.cursor();
  std::uint8_t* const oend = window_.end();
  while (iend - ip >= kFastInput && oend - op >= kFastRoom) {
    const std::uint8_t* p = ip;
    const unsigned token = *p++;
    std::uint64_t lit = token >> 4;
    unsigned s = 0;
    if (lit == 15) {
      do {
        if (p == iend) goto stop;
        s = *p++;
        lit += s;
      } while (s == 255);
    }
    const std::uint8_t* const lit_src = p;
    if (static_cast<std::uint64_t>(iend - p) < lit + 2) break;
    p += lit;
    const std::uint32_t offset =
        static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8);
    p += 2;
    std::uint64_t mlen = token & 15;
    if (mlen == 15) {
      do {
        if (p == iend) goto stop;
        s = *p++;
        mlen += s;
      } while (s == 255);
    }
    mlen += kMinMatch;
    if (static_cast<std::uint64_t>(oend - op) < lit + mlen + kWildSlack) break;
    {
      const std::int64_t at = in_at(ip);
      const std::int64_t opa = static_cast<std::int64_t>(window_.position_of(op));
      const Kind kind = token_kind(false, token >> 4, at + 1, opa, block_, output_);
      if ((token >> 4) == 15 && in_at(lit_src) > block_ - 15) break;
      const LiteralVerdict lv =
          literal_verdict(kind, token >> 4, lit, in_at(lit_src), opa, block_, output_);
      if (lv.what != Literals::copy) break;
      if ((token & 15) == 15 && in_at(p) > block_ - 4) break;
      const auto after = opa + static_cast<std::int64_t>(lit);
      if (match_verdict(lv.kind, token & 15, mlen, offset, after, output_).what != Match::copy)
        break;
    }
    std::memcpy(op, lit_src, lit);
    op += lit;
    copy_match_wild(op, offset, mlen);
    op += mlen;
    ip = p;
  }
stop:
  ip_ref = ip;
  window_.set_cursor(op);
}

Status Lz4BlockStream::run(const std::uint8_t* ip, const std::uint8_t* const iend,
                           std::vector<Bytes>& out) {
  for (;;) {
    switch (state_) {
      case State::token: {
        if (window_.room() >= static_cast<std::size_t>(kFastRoom)) {
          fast_loop(ip, iend);
        }
        if (ip == iend) return ok_status();
        sequence_at_ = in_at(ip);
        token_ = *ip++;
        literal_length_ = token_ >> 4;
        kind_ = token_kind(fast_mode_, token_ >> 4, in_at(ip),
                           static_cast<std::int64_t>(window_.written()), block_, output_);
        if (literal_length_ == 15) {
          state_ = State::literal_length;
          break;
        }
        if (Status s = decide_literals(in_at(ip)); !s) return s;
        break;
      }
      case State::literal_length: {
        if (ip == iend) return ok_status();
        const unsigned s = *ip++;
        literal_length_ += s;
        // liblz4 reads a literal length only while 15 bytes of the block are left.
        if (in_at(ip) > block_ - 15)
          return error("literal length runs into the last 15 bytes of the block");
        if (s == 255) break;
        if (Status st = decide_literals(in_at(ip)); !st) return st;
        break;
      }
      case State::literals: {
        while (literals_left_ > 0) {
          if (ip == iend) return ok_status();
          if (window_.room() == 0) {
            if (Status s = next_window(out); !s) return s;
          }
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(
              {literals_left_, static_cast<std::uint64_t>(iend - ip), window_.room()}));
          std::memcpy(window_.cursor(), ip, n);
          window_.advance(n);
          ip += n;
          literals_left_ -= n;
        }
        if (last_) {
          state_ = State::end;
          break;
        }
        offset_ = 0;
        offset_bytes_ = 0;
        state_ = State::offset;
        break;
      }
      case State::offset: {
        if (ip == iend) return ok_status();
        offset_ |= static_cast<std::uint32_t>(*ip++) << (8 * offset_bytes_);
        if (++offset_bytes_ < 2) break;
        match_length_ = token_ & 15;
        if (match_length_ == 15) {
          state_ = State::match_length;
          break;
        }
        if (Status s = decide_match(); !s) return s;
        break;
      }
      case State::match_length: {
        if (ip == iend) return ok_status();
        const unsigned s = *ip++;
        match_length_ += s;
        // liblz4 reads a match length only while 4 bytes of the block are left.
        if (in_at(ip) > block_ - 4)
          return error("match length runs into the last 4 bytes of the block");
        if (s == 255) break;
        if (Status st = decide_match(); !st) return st;
        break;
      }
      case State::match: {
        while (match_left_ > 0) {
          if (window_.room() == 0) {
            if (Status s = next_window(out); !s) return s;
          }
          const std::size_t n =
              static_cast<std::size_t>(std::min<std::uint64_t>(match_left_, window_.room()));
          copy_match_exact(window_.cursor(), offset_, n);
          window_.advance(n);
          match_left_ -= n;
        }
        state_ = State::token;
        break;
      }
      case State::end: {
        // The last literals end the block (literal_verdict): nothing can follow.
        if (ip != iend) return error("bytes after the block's last literals");
        return ok_status();
      }
    }
  }
}

}  // namespace daskcaps::detail
