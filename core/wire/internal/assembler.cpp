#include "core/wire/internal/assembler.h"

#include <algorithm>
#include <cstring>

#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"

namespace daskcaps {

// The staging chunk: uninitialised bytes (they are always written before
// they are read), shared with the messages cut from it.
struct MessageAssembler::Chunk {
  explicit Chunk(std::size_t n) : data(new std::uint8_t[n]), capacity(n) {}
  std::unique_ptr<std::uint8_t[]> data;
  std::size_t capacity;
};

namespace {
// A large message's first reservation when the stream size is unknown: room
// for what arrived twice over, at least this much, never beyond the message.
constexpr std::uint64_t kLargeFirstReserve = std::uint64_t{1} << 20;
}  // namespace

MessageAssembler::MessageAssembler(const Limits& limits) : MessageAssembler(limits, Options{}) {}

MessageAssembler::MessageAssembler(const Limits& limits, const Options& options)
    : limits_(limits), options_(options), offset_(options.base) {
  options_.chunk_bytes = std::max<std::size_t>(options_.chunk_bytes, 64);
}

std::uint64_t MessageAssembler::buffered() const {
  if (streaming_) return stream_got_;
  return large_ ? large_->size() : chunk_have();
}

std::uint64_t MessageAssembler::pending_need() const {
  const std::uint64_t have = buffered();
  return known_total_ > have ? known_total_ - have : 0;
}

ByteSpan MessageAssembler::unconsumed() const {
  if (large_) return large_->span();
  if (!chunk_) return {};
  return ByteSpan(chunk_->data.get() + begin_, chunk_have());
}

void MessageAssembler::drop_front(std::size_t n) {
  if (large_) return;  // resynchronisation works on chunk-sized candidates only
  n = std::min(n, chunk_have());
  begin_ += n;
  offset_ += n;
  known_total_ = 0;
  error_.reset();
  if (!hold_) advance();
}

void MessageAssembler::set_hold(bool hold) {
  if (hold_ == hold) return;
  hold_ = hold;
  if (!hold_ && !error_) advance();
}

void MessageAssembler::restart_at(std::uint64_t offset) {
  streaming_ = false;
  stream_total_ = stream_got_ = 0;
  piece_chunk_.reset();
  piece_used_ = 0;
  large_.reset();
  large_need_ = 0;
  known_total_ = 0;
  if (chunk_ && chunk_.use_count() == 1) {
    begin_ = end_ = 0;
  } else {
    chunk_.reset();
    begin_ = end_ = 0;
  }
  offset_ = offset;
  error_.reset();
}

void MessageAssembler::release_idle() {
  if (streaming_ || large_ || chunk_have() != 0) return;
  chunk_.reset();
  begin_ = end_ = 0;
}

void MessageAssembler::fail(Error e) {
  if (!error_) error_ = std::move(e);
}

bool MessageAssembler::fits_stream(std::uint64_t total) {
  if (!options_.stream_bytes) return true;
  const std::uint64_t left = *options_.stream_bytes > offset_ ? *options_.stream_bytes - offset_ : 0;
  if (total <= left) return true;
  fail(make_error(Errc::truncated,
                  "needs " + std::to_string(total) + " bytes, the " + std::string(options_.stream_noun) +
                      " has " + std::to_string(left) + " left",
                  offset_));
  return false;
}

std::span<std::uint8_t> MessageAssembler::buffer() {
  if (error_) return std::span<std::uint8_t>(spare_, sizeof spare_);
  if (streaming_) {
    // A fresh chunk once the last one is full (the same one when no piece
    // of it is still held): the pieces cut from it live on with their
    // consumer.
    const std::uint64_t left = stream_total_ - stream_got_;
    if (piece_chunk_ && piece_used_ == piece_chunk_->capacity && piece_chunk_.use_count() == 1) piece_used_ = 0;
    if (!piece_chunk_ || piece_used_ == piece_chunk_->capacity) {
      piece_chunk_ = std::make_shared<Chunk>(static_cast<std::size_t>(
          std::min<std::uint64_t>(std::max<std::uint64_t>(left, 1), std::max<std::size_t>(options_.piece_bytes, 64))));
      piece_used_ = 0;
    }
    const std::size_t room =
        static_cast<std::size_t>(std::min<std::uint64_t>(piece_chunk_->capacity - piece_used_, left));
    return std::span<std::uint8_t>(piece_chunk_->data.get() + piece_used_, room);
  }
  if (large_) {
    // Never past the end of this message (or of the prelude being read).
    if (large_->size() == large_->capacity()) {
      const std::uint64_t grown = std::min<std::uint64_t>(large_need_, std::uint64_t{large_->capacity()} * 2);
      if (auto st = large_->grow(static_cast<std::size_t>(grown)); !st) {
        fail(std::move(st).error().add_context("message @" + hex_offset(offset_)));
        return std::span<std::uint8_t>(spare_, sizeof spare_);
      }
    }
    const std::uint64_t room = std::min<std::uint64_t>(large_->capacity(), large_need_) - large_->size();
    return std::span<std::uint8_t>(large_->data() + large_->size(), static_cast<std::size_t>(room));
  }
  if (!chunk_) {
    chunk_ = std::make_shared<Chunk>(options_.chunk_bytes);
    begin_ = end_ = 0;
  }
  if (begin_ == end_ && chunk_.use_count() == 1) {
    begin_ = end_ = 0;
    if (chunk_->capacity > options_.chunk_bytes) chunk_ = std::make_shared<Chunk>(options_.chunk_bytes);
  }
  if (end_ == chunk_->capacity) {
    // The partial message at the end moves to the front: in place when no
    // message still points into the chunk, else into a fresh chunk. (It is
    // smaller than a chunk: a larger one has its own buffer by now.)
    const std::size_t have = chunk_have();
    if (begin_ == 0) {
      // Undecoded bytes fill the chunk (held): a larger one.
      auto fresh = std::make_shared<Chunk>(chunk_->capacity * 2);
      std::memcpy(fresh->data.get(), chunk_->data.get(), have);
      chunk_ = std::move(fresh);
    } else if (chunk_.use_count() == 1) {
      std::memmove(chunk_->data.get(), chunk_->data.get() + begin_, have);
    } else {
      auto fresh = std::make_shared<Chunk>(options_.chunk_bytes);
      std::memcpy(fresh->data.get(), chunk_->data.get() + begin_, have);
      chunk_ = std::move(fresh);
    }
    begin_ = 0;
    end_ = have;
  }
  return std::span<std::uint8_t>(chunk_->data.get() + end_, chunk_->capacity - end_);
}

void MessageAssembler::commit(std::size_t n) {
  if (error_ || n == 0) return;
  if (streaming_) {
    pieces_.emplace_back(std::shared_ptr<const void>(piece_chunk_),
                         ByteSpan(piece_chunk_->data.get() + piece_used_, n));
    piece_used_ += n;
    stream_got_ += n;
    if (stream_got_ == stream_total_) {
      // The message is over: the next one starts in the staging chunk.
      streaming_ = false;
      offset_ += stream_total_;
      stream_total_ = stream_got_ = 0;
      known_total_ = 0;
      piece_chunk_.reset();
      piece_used_ = 0;
    }
    return;
  }
  if (large_) {
    large_->resize(large_->size() + n);
    if (large_->size() >= large_need_ && !hold_) advance();
    return;
  }
  end_ += n;
  if (!hold_) advance();
}

std::size_t MessageAssembler::push(ByteSpan data) {
  std::size_t taken = 0;
  while (taken < data.size() && !error_) {
    std::span<std::uint8_t> room = buffer();
    if (error_) break;
    const std::size_t k = std::min(room.size(), data.size() - taken);
    std::memcpy(room.data(), data.data() + taken, k);
    taken += k;
    commit(k);
  }
  return taken;
}

std::optional<MessageAssembler::Partial> MessageAssembler::partial() const {
  if (!large_ || streaming_ || error_ || !ready_.empty() || known_total_ == 0) return std::nullopt;
  const ByteSpan have = large_->span();
  if (have.size() < 16) return std::nullopt;
  std::uint64_t n = 0;
  std::memcpy(&n, have.data() + 8, 8);
  // known_total_ is set once decode_frames has checked the whole length
  // table, so it is in and n is within the limits.
  if (have.size() < prelude_size(n)) return std::nullopt;
  Partial p;
  p.offset = offset_;
  p.wire_size = known_total_;
  p.lengths.resize(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < p.lengths.size(); ++i) std::memcpy(&p.lengths[i], have.data() + 16 + 8 * i, 8);
  p.have = Bytes(std::shared_ptr<const void>(large_), have);
  return p;
}

void MessageAssembler::stream_rest() {
  if (!large_ || streaming_ || known_total_ == 0) return;
  streaming_ = true;
  stream_total_ = known_total_;
  stream_got_ = large_->size();
  if (stream_got_ > 0) pieces_.emplace_back(std::shared_ptr<const void>(large_), large_->span());
  large_.reset();
  large_need_ = 0;
  piece_chunk_.reset();
  piece_used_ = 0;
}

std::optional<Bytes> MessageAssembler::next_piece() {
  if (pieces_.empty()) return std::nullopt;
  Bytes b = std::move(pieces_.front());
  pieces_.pop_front();
  return b;
}

Result<std::optional<RawMessage>> MessageAssembler::next() {
  if (!ready_.empty()) {
    RawMessage m = std::move(ready_.front());
    ready_.pop_front();
    return std::optional<RawMessage>(std::move(m));
  }
  if (error_) return *error_;
  return std::optional<RawMessage>{};
}

void MessageAssembler::advance() {
  for (;;) {
    if (large_) {
      if (large_->size() < large_need_ || !finish_large()) return;
      continue;
    }
    if (chunk_have() == 0 || !cut_from_chunk()) return;
  }
}

// One step on the bytes in the chunk: cut a whole message (true), or learn
// how much the message needs and wait or move it to its own buffer (false).
bool MessageAssembler::cut_from_chunk() {
  const ByteSpan view(chunk_->data.get() + begin_, chunk_have());
  auto step = decode_frames(view, limits_, offset_);
  if (!step) {
    fail(std::move(step).error());
    return false;
  }
  if (const auto* more = std::get_if<NeedMore>(&*step)) {
    if (!fits_stream(more->total)) return false;
    if (more->whole) known_total_ = more->total;
    if (more->total > chunk_->capacity) enter_large(more->total);
    return false;
  }
  const Framed& framed = std::get<Framed>(*step);
  RawMessage m;
  m.offset = offset_;
  m.wire_size = framed.wire_size;
  m.short_length = framed.short_length;
  m.frames.reserve(framed.frames.size());
  std::shared_ptr<const void> owner = chunk_;
  for (ByteSpan f : framed.frames) m.frames.emplace_back(Bytes(owner, f));
  ready_.push_back(std::move(m));
  begin_ += static_cast<std::size_t>(framed.wire_size);
  offset_ += framed.wire_size;
  known_total_ = 0;
  return true;
}

// The message at the front of the chunk needs `need` bytes (the whole
// message, or first its length table), more than a chunk: it gets its own
// buffer and the bytes so far move there.
bool MessageAssembler::enter_large(std::uint64_t need) {
  const std::size_t have = chunk_have();
  std::uint64_t reserve = need;
  if (!options_.stream_bytes)
    reserve = std::min<std::uint64_t>(need, std::max<std::uint64_t>(std::uint64_t{have} * 2, kLargeFirstReserve));
  if (reserve > SIZE_MAX) {
    fail(make_error(Errc::limit_exceeded, "message of " + std::to_string(need) + " bytes", offset_));
    return false;
  }
  auto buf = PageBuffer::reserve(static_cast<std::size_t>(reserve));
  if (!buf) {
    fail(std::move(buf).error().add_context("message @" + hex_offset(offset_)));
    return false;
  }
  std::memcpy((*buf)->data(), chunk_->data.get() + begin_, have);
  (*buf)->resize(have);
  large_ = std::shared_ptr<PageBuffer>(std::move(*buf));
  large_need_ = need;
  begin_ = end_;
  if (chunk_.use_count() == 1) begin_ = end_ = 0;
  return true;
}

// large_ holds large_need_ bytes: decode again. Either the length table is
// now in and the message needs more, or the message is complete.
bool MessageAssembler::finish_large() {
  auto step = decode_frames(large_->span(), limits_, offset_);
  if (!step) {
    fail(std::move(step).error());
    return false;
  }
  if (const auto* more = std::get_if<NeedMore>(&*step)) {
    if (!fits_stream(more->total)) return false;
    if (options_.stream_bytes) {
      // The stream holds it all: reserve it at once (pages cost memory only
      // as they are written).
      if (auto st = large_->grow(static_cast<std::size_t>(more->total)); !st) {
        fail(std::move(st).error().add_context("message @" + hex_offset(offset_)));
        return false;
      }
    }
    if (more->whole) known_total_ = more->total;
    large_need_ = more->total;
    return false;
  }
  const Framed& framed = std::get<Framed>(*step);
  RawMessage m;
  m.offset = offset_;
  m.wire_size = framed.wire_size;
  m.short_length = framed.short_length;
  m.storage = large_;
  m.frames.reserve(framed.frames.size());
  std::shared_ptr<const void> owner = large_;
  for (ByteSpan f : framed.frames) m.frames.emplace_back(Bytes(owner, f));
  ready_.push_back(std::move(m));
  offset_ += framed.wire_size;
  large_.reset();
  large_need_ = 0;
  known_total_ = 0;
  return true;
}

}  // namespace daskcaps
