// MessageAssembler: the one place where a Dask byte stream becomes whole
// messages (docs/protocol.md §1.2, §1.3), for files, captures and sockets alike.
//
// It is sans-IO: it owns the memory the bytes go into and tells the caller
// where to put the next ones, so that each message is read into its own
// buffer in place:
//
//   MessageAssembler a(limits);
//   for (;;) {
//     std::span<std::uint8_t> room = a.buffer();     // never empty
//     ssize_t n = ::read(fd, room.data(), room.size());
//     a.commit(n);
//     while (auto m = a.next()) { ... }              // Result<optional<...>>
//   }
//
// or, for bytes that arrive elsewhere (TCP reassembly, tests), push(bytes),
// which copies them in through the same path.
//
// Memory:
//   - Preludes and small messages are read into a staging chunk
//     (Options::chunk_bytes, 64 KiB by default); a message that lies
//     wholly inside it is handed out as slices of the chunk, without a copy.
//     When the bytes held fill a whole chunk undecoded (a stream held for
//     resynchronisation), the next chunk is twice as large.
//     The chunk is allocated when bytes are first wanted and, once nothing
//     is left in it, can be given back (release_idle()), so an idle stream
//     holds no buffer.
//   - A message that does not fit gets its own PageBuffer
//     (core/base/internal/page_buffer.h) as soon as its prelude says how large it is:
//     the bytes already in the chunk are moved there once, and buffer() then
//     offers exactly the rest of that message, so the caller reads it in
//     place and never past its end. The buffer grows with what actually
//     arrives (doubling, never beyond the message), not to the claimed size
//     up front. When the stream's total size is known (a file), a prelude
//     that claims more than the stream still holds is refused before
//     anything is allocated (Errc::truncated, "needs N bytes, the stream has
//     M left"), and the buffer is reserved at once (its pages still cost
//     memory only as they are written).
//   - Limits::max_frames and max_message_bytes are checked by decode_frames
//     (core/wire/frames.h) from the prelude, before any byte of a frame.
//
// Cut-through (a live proxy forwarding a large message before its end is
// in): partial() shows the message in progress once its length table is in
// and it has its own buffer; stream_rest() then stops keeping it: the bytes
// received so far and every later byte of that message come out of
// next_piece() as they arrive, in order, each piece a slice of a read chunk
// (Options::piece_bytes) that lives as long as the piece does, so memory
// follows what the consumer still holds, not the message. buffer() never
// offers room past the message's end; after its last byte the assembler
// goes on with the next message as usual (its pieces may still be waiting).
//
// Errors: what decode_frames reports (bad prelude, a limit), the stream-size
// check above, and Errc::limit_exceeded when the kernel refuses memory.
// After an error every next() returns it again; complete messages cut
// before the error are handed out first.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "core/base/internal/page_buffer.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/raw_message.h"

namespace daskcaps {

class MessageAssembler {
 public:
  struct Options {
    /// Stream offset of the first byte (error offsets and message offsets).
    std::uint64_t base = 0;
    /// Bytes the whole stream holds from offset 0, when known (a regular
    /// file): a prelude claiming more is refused before allocating.
    std::optional<std::uint64_t> stream_bytes;
    /// What the stream is called in that error ("file").
    const char* stream_noun = "stream";
    /// Size of the staging chunk for preludes and small messages.
    std::size_t chunk_bytes = std::size_t{64} << 10;
    /// Size of the read chunks of a streamed message (stream_rest()).
    std::size_t piece_bytes = std::size_t{256} << 10;
  };

  /// The message in progress, seen before its end (see "Cut-through").
  struct Partial {
    std::uint64_t offset = 0;              // stream offset of its L field
    std::uint64_t wire_size = 0;           // bytes it occupies
    std::vector<std::uint64_t> lengths;    // every frame's length
    Bytes have;                            // the bytes received so far, from its L field
  };

  explicit MessageAssembler(const Limits& limits);
  MessageAssembler(const Limits& limits, const Options& options);

  /// Where the next bytes of the stream go: never empty. Writing fewer bytes
  /// than its size is fine. May allocate (the staging chunk, or a large
  /// message's buffer); a failed allocation makes next() fail and buffer()
  /// return a span into a small spare block, so callers need no check here.
  std::span<std::uint8_t> buffer();
  /// `n` bytes were written at the start of the last buffer().
  void commit(std::size_t n);
  /// Copies `data` in through buffer()/commit(); messages completed on the
  /// way are queued for next(). Returns how many bytes it took: all of
  /// them, unless the stream failed on the way.
  std::size_t push(ByteSpan data);

  /// The next complete message, nullopt when more bytes are needed, or the
  /// stream's error (see above).
  Result<std::optional<RawMessage>> next();

  /// The message in progress once its length table is in and it has its
  /// own buffer (it does not fit a staging chunk); nullopt otherwise, while
  /// complete messages wait in next(), or while a message is streamed.
  std::optional<Partial> partial() const;
  /// Hands out the rest of the message in progress as it arrives (see
  /// "Cut-through"), starting with the bytes partial() showed. Requires
  /// partial().
  void stream_rest();
  /// True while a streamed message still lacks bytes.
  bool streaming() const { return streaming_; }
  /// The next piece of the streamed message, nullopt when none waits.
  std::optional<Bytes> next_piece();

  /// Stream offset of the first byte not yet handed out in a message.
  std::uint64_t offset() const { return offset_; }
  /// Bytes received of the message in progress (and of any messages queued).
  std::uint64_t buffered() const;  // a streamed message: what arrived of it
  /// Bytes the message in progress still lacks, when its prelude is in;
  /// 0 otherwise.
  std::uint64_t pending_need() const;
  /// Wire size of the message in progress once its prelude is in, else 0.
  std::uint64_t expected() const { return known_total_; }
  /// True when no partial message is held.
  bool at_boundary() const { return buffered() == 0; }
  bool failed() const { return error_.has_value(); }

  /// The bytes of the partial message in progress, while they are in the
  /// staging chunk (for resynchronisation, which inspects candidates).
  ByteSpan unconsumed() const;
  /// Discards the first `n` unconsumed bytes (resynchronisation); `n` must
  /// not exceed unconsumed().size().
  void drop_front(std::size_t n);
  /// Forgets everything held (a partial message, queued messages are kept)
  /// and continues at stream offset `offset` (a gap in a capture). Clears
  /// an error.
  void restart_at(std::uint64_t offset);
  /// Gives the staging chunk back when it holds nothing.
  void release_idle();
  /// While held, committed bytes are only kept, not decoded (a capture
  /// stream out of sync: the caller looks for a message start in
  /// unconsumed() and drops what cannot be one). Releasing decodes them.
  void set_hold(bool hold);

 private:
  struct Chunk;
  void advance();
  bool cut_from_chunk();
  bool enter_large(std::uint64_t need);
  bool finish_large();
  void fail(Error e);
  bool fits_stream(std::uint64_t total);
  std::size_t chunk_have() const { return end_ - begin_; }

  Limits limits_;
  Options options_;
  std::shared_ptr<Chunk> chunk_;
  std::size_t begin_ = 0, end_ = 0;  // unconsumed bytes of the chunk
  std::shared_ptr<PageBuffer> large_;
  std::uint64_t large_need_ = 0;   // bytes large_ must hold before it is decoded again
  std::uint64_t known_total_ = 0;  // wire size of the message in progress, once known
  std::uint64_t offset_ = 0;       // stream offset of chunk[begin_] (or of large_[0])
  std::deque<RawMessage> ready_;
  std::optional<Error> error_;
  bool hold_ = false;
  // The streamed message (stream_rest()).
  bool streaming_ = false;
  std::uint64_t stream_total_ = 0;  // its wire size
  std::uint64_t stream_got_ = 0;    // bytes of it received
  std::shared_ptr<Chunk> piece_chunk_;
  std::size_t piece_used_ = 0;
  std::deque<Bytes> pieces_;
  std::uint8_t spare_[256];        // buffer() after a failure
};

}  // namespace daskcaps
