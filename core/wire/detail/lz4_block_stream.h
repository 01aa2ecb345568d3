// A resumable decoder of one raw LZ4 block whose bytes arrive in pieces,
// for the "lz4" frames of core/wire/internal/stream_codec.h. liblz4 decodes a block
// only whole; this one keeps its place between pieces.
//
// The block (lz4_Block_format.md) is a series of sequences:
//   token        1 byte: literal length (high 4 bits), match length - 4 (low 4)
//   lit. length  while a length so far is 15 (or the last byte was 255):
//                bytes added to it, each 0-255, ending at one below 255
//   literals     that many bytes, copied to the output
//   offset       2 bytes little-endian, 1-65535: the match starts this far
//                back in the output
//   match length extra bytes as for the literal length, when the low 4
//                bits are 15
// and ends after the literals of its last sequence, which has no offset.
//
// Which blocks decode is LZ4_decompress_safe's rule in liblz4 1.9.4, whose
// checks depend on where a sequence sits against the ends of the block and
// of the output (both known from the start: the frame's size and its
// prefix), and on which of liblz4's loops would read it: its fast loop
// while more than 64 bytes of output are left, then its safe loop, whose
// shortcut for short sequences skips the end-of-output check. The decoder
// makes the same decisions at the same points (token_kind, literal_verdict,
// match_verdict in the source), so that what decodes here and there is the
// same, except an offset of 0, which liblz4 decodes as zeros and this
// decoder refuses. An output of 0 bytes needs the one-byte block 00.
//
// Errors are Errc::codec_failed with the offset in the block of the
// sequence's token (the caller adds the frame's 4-byte prefix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "core/wire/detail/output_window.h"

namespace daskcaps::detail {

class Lz4BlockStream {
 public:
  /// A block of `block_bytes` that decodes to `output_bytes` (at most
  /// 2^31 - 1 of each), handed out in windows of piece_bytes.
  Lz4BlockStream(std::uint64_t block_bytes, std::uint64_t output_bytes, std::size_t piece_bytes);
  /// Defined in the detail source, so that no public source emits it (and
  /// libdaskcaps.so does not export it).
  ~Lz4BlockStream();

  /// The block's next bytes (never past its end: the caller checks).
  /// Appends the output they complete to `out`.
  Status feed(ByteSpan in, std::vector<Bytes>& out);
  /// After the block's last byte: fails unless the block ended where a
  /// sequence may end it, having made exactly output_bytes.
  Status finish(std::vector<Bytes>& out);
  /// Output bytes handed out in all.
  std::uint64_t handed_out() const { return window_.handed_out(); }

  /// Called inside feed() with the pieces handed out so far each time a
  /// window is full, for a caller that passes them on (and clears the
  /// vector) there and then: one match can make up to the whole output
  /// from the length bytes of earlier pieces, and the windows of one feed()
  /// would otherwise all be held until it returns. Its error stops the
  /// decoding and is returned by feed().
  using Drain = std::function<Status(std::vector<Bytes>&)>;
  void set_drain(Drain drain) { drain_ = std::move(drain); }

  // Which of liblz4's paths reads a sequence (see the .cpp).
  enum class Kind : std::uint8_t { fast, shortcut, safe };

 private:
  enum class State : std::uint8_t {
    token,
    literal_length,
    literals,
    offset,
    match_length,
    match,
    end
  };

  Status run(const std::uint8_t* ip, const std::uint8_t* iend, std::vector<Bytes>& out);
  void fast_loop(const std::uint8_t*& ip, const std::uint8_t* iend);
  void fast_mode_loop(const std::uint8_t*& ip, const std::uint8_t* iend);
  void safe_mode_loop(const std::uint8_t*& ip, const std::uint8_t* iend);
  Status decide_literals(std::int64_t ipa);
  Status decide_match();
  Status next_window(std::vector<Bytes>& out);
  std::int64_t in_at(const std::uint8_t* p) const { return chunk_pos_ + (p - chunk_); }
  Error error(std::string what) const;

  const std::int64_t block_;   // I: the block's size
  const std::int64_t output_;  // N: the output's size
  OutputWindow window_;

  State state_ = State::token;
  bool fast_mode_;          // liblz4 is still in its fast loop
  Kind kind_ = Kind::fast;  // of the current sequence
  std::uint8_t token_ = 0;
  std::uint8_t offset_bytes_ = 0;  // of the offset, read so far
  bool last_ = false;              // the literals end the block
  std::uint32_t offset_ = 0;
  std::uint64_t literal_length_ = 0;
  std::uint64_t literals_left_ = 0;
  std::uint64_t match_length_ = 0;
  std::uint64_t match_left_ = 0;
  std::int64_t sequence_at_ = 0;  // block offset of the current token

  // The piece being decoded: its first byte and that byte's block offset.
  const std::uint8_t* chunk_ = nullptr;
  std::int64_t chunk_pos_ = 0;
  std::int64_t consumed_ = 0;  // block bytes decoded before this piece
  Drain drain_;
};

}  // namespace daskcaps::detail
