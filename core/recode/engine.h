// RecodeEngine: one persistent pool of workers that recodes the messages of
// any number of streams (core/recode/transcode.h does one message), for a
// file (`transcode`) and for live connections (`bridge`) alike.
//
// Contract:
//   - A stream is opened with its TranscodeOptions. Its messages come back
//     in the order they were submitted, whatever order the workers finish
//     them in; streams are independent of each other.
//   - Delivery is either a callback per stream (called in order, never
//     concurrently for one stream, on a worker thread or on the thread that
//     submitted or flushed), or, for a stream without one, a queue that the
//     owner drains with poll(); event_fd() becomes readable when it holds
//     outputs, for an event loop.
//   - Work in flight is bounded in bytes: the wire bytes of messages
//     submitted and not yet delivered, across all streams, stay within
//     EngineOptions::max_inflight_bytes, except that one message is always
//     accepted when nothing is in flight (so no message is too large to
//     pass). submit() waits for room; try_submit() answers `full` instead,
//     for a loop that then stops reading that input (back-pressure) until
//     poll() or a delivery frees room.
//   - Small messages cost microseconds, not a thread hand-off: up to
//     inline_bytes they are recoded on the submitting thread when the stream
//     asks for it (a live connection, where latency matters); otherwise
//     messages up to batch_bytes are collected into batches of up to
//     batch_messages, which a worker recodes together. A batch goes out when
//     it is full, at flush(), or when the stream has nothing else in flight.
//   - Messages that need no change are recognised from frame 0 alone
//     (needs_recode() below) and come back with their frames untouched;
//     frame 0 is still decoded under the stream's limits (not re-encoded),
//     so a message the full path would refuse is refused here too.
//   - A message that fails to recode comes back as an error in its place;
//     the stream goes on, the other streams are not disturbed. cancel()
//     drops a stream's queued work and undelivered outputs; once it
//     returns, nothing more of that stream is delivered.
//   - Large frames use every core: zstd compresses them with
//     EngineOptions::threads workers of its own (ZSTD_c_nbWorkers).
//
// Thread safety: every member function may be called from any thread,
// except that a delivery callback must not call cancel() or drain() on its
// own stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/recode/transcode.h"

namespace daskcaps {

class MessageSink;  // core/wire/internal/message_sink.h: where a message is written in place

struct EngineOptions {
  /// Worker threads; 0: one per core.
  unsigned threads = 0;
  /// Wire bytes submitted and not yet delivered, across all streams.
  std::uint64_t max_inflight_bytes = std::uint64_t{64} << 20;
  /// Messages up to this size form batches (0: never batch).
  std::uint64_t batch_bytes = std::uint64_t{64} << 10;
  /// Messages per batch at most.
  std::size_t batch_messages = 64;
  /// transcode_stream() only: the size from which a message is recoded in
  /// place (see there); 0: never.
  std::uint64_t in_place_bytes = std::uint64_t{16} << 20;
};

/// False when `frame0` (and the message's frame count) show that recoding
/// with `options` cannot change the message: it holds no __Serialized__ or
/// __Pickled__ object, is not a handshake and, with a pickle protocol, has
/// no "exception" (an error pickle inside frame 0). Reads only frame 0's
/// bytes, without decoding it.
bool needs_recode(const RawMessage& message, const TranscodeOptions& options);

/// One message recoded as `transcode` and the bridge recode each message
/// (what a RecodeEngine worker does; the Python module's dask_caps.recode()
/// calls it too): when needs_recode() says nothing can change, the frames
/// come back untouched (`passed_through`), frame 0 still decoded under the
/// limits so that a message the full path refuses is refused here too;
/// otherwise the message is parsed (parse_message), its stored frames
/// read in (load_stored_frames), and recoded (transcode_message). Error
/// offsets count from the message's offset; its storage, when its own, may
/// be given back page by page as frames are done. Errors: those of the
/// calls named, unchanged.
Result<std::vector<Bytes>> recode_message(RawMessage message, const TranscodeOptions& options,
                                          TranscodeReport& report, bool& passed_through);

namespace detail {
class OrderedPool;
}  // namespace detail

class RecodeEngine {
 public:
  using StreamId = std::uint64_t;

  /// One message to recode.
  struct Input {
    std::uint64_t tag = 0;      // the caller's, given back with the output
    std::uint64_t index = 0;    // the caller's, given back with the output
    /// The message (its offset for error offsets; its wire size is the
    /// byte bound, computed when 0). Stored frames are read into memory
    /// before it is recoded.
    RawMessage raw;
    /// The message already parsed from `raw`, to spare the worker parsing
    /// it again; `raw` then keeps only its offset and wire size.
    std::optional<Message> parsed;
  };

  /// One message recoded (or its error), in submission order.
  struct Output {
    StreamId stream = 0;
    std::uint64_t tag = 0;
    std::uint64_t index = 0;
    std::uint64_t seq = 0;          // its position in the stream, from 0
    std::uint64_t wire_size = 0;    // the input's wire size
    Result<std::vector<Bytes>> frames{std::vector<Bytes>{}};
    TranscodeReport report;
    bool passed_through = false;    // frames untouched (needs_recode() was false)
  };
  using Deliver = std::function<void(Output&&)>;

  struct StreamOptions {
    TranscodeOptions transcode;
    /// Messages up to this size are recoded on the submitting thread (0:
    /// never). For live connections: no hand-off for a small message.
    std::uint64_t inline_bytes = 0;
  };

  explicit RecodeEngine(const EngineOptions& options = {});
  ~RecodeEngine();
  RecodeEngine(const RecodeEngine&) = delete;
  RecodeEngine& operator=(const RecodeEngine&) = delete;

  /// A new stream. With `deliver`, outputs go to it; without, to poll().
  StreamId open_stream(const StreamOptions& options, Deliver deliver = {});

  enum class Submitted : std::uint8_t { accepted, full, closed };
  /// Queues a message without waiting: `full` when the byte bound has no
  /// room (nothing is queued and `input` is left as it was: try again after
  /// a delivery), `closed` for a cancelled or unknown stream. `input` is
  /// moved from only when accepted.
  Submitted try_submit(StreamId stream, Input& input);
  /// Queues a message, waiting while the byte bound is full. False for a
  /// cancelled or unknown stream.
  bool submit(StreamId stream, Input input);
  /// Sends the stream's open batch to the workers now.
  void flush(StreamId stream);

  /// Drops the stream's queued work and undelivered outputs and forgets it;
  /// work already running finishes and is discarded. No delivery of this
  /// stream happens after it returns.
  void cancel(StreamId stream);
  /// Flushes, waits until every message submitted to the stream has been
  /// delivered (callback streams) or queued for poll(), then forgets it.
  void finish(StreamId stream);
  /// The same, but the stream stays open for more messages.
  void drain(StreamId stream);

  /// Readable while outputs wait for poll() (an eventfd; the engine owns it).
  int event_fd() const;
  /// Hands out up to `max` queued outputs (streams without a callback), in
  /// order per stream; returns how many.
  std::size_t poll(const Deliver& fn, std::size_t max = SIZE_MAX);

  /// Waits until a message of `bytes` to `stream` would be accepted without
  /// waiting (or nothing is in flight), sending the stream's open batch to
  /// the workers first when it must wait: for a reader that would otherwise
  /// hold the next message while submit() waits.
  void wait_for_room(StreamId stream, std::uint64_t bytes);
  /// Wire bytes submitted and not yet delivered.
  std::uint64_t inflight_bytes() const;
  unsigned threads() const;

 private:
  // The workers, their queues and locks (core/recode/detail/ordered_pool.h),
  // out of this header.
  std::unique_ptr<detail::OrderedPool> pool_;
};

/// The driver of `transcode`: reads messages from `next` (nullopt at the
/// end) on this thread, recodes them on an engine of its own, and hands each
/// result to `write` in order (on whichever thread delivers it, one call at a
/// time). Memory stays within the engine's byte bound: the next message is
/// read only once there is room for one as large as the largest so far. Stops at the first error (reader, recode or writer) and returns it;
/// a recode error gets the context "message <i>", i counting the messages
/// `next` gave from 0.
///
/// With `in_place`, a large message (its frames left in their file, or the
/// frames the whole path would decode, those whose codec changes and, with
/// a pickle protocol, every compressed one, declaring
/// EngineOptions::in_place_bytes or more decoded, or not saying) that is no
/// handshake is recoded on this thread in place instead
/// (core/recode/internal/stream_recode.h), with any codec, pickle and layout
/// options, once every message before it is written: `in_place` hands it
/// the sink to write the message's bytes to, in order with `write`.
/// Memory for it: a window, whatever it decodes to, but for objects whose
/// pickles change and that do not stream (stream_recode.h). The bytes are
/// those the engine would deliver.
using InputFn = std::function<Result<std::optional<RecodeEngine::Input>>()>;
using OutputFn = std::function<Status(std::uint64_t tag, std::span<const Bytes> frames)>;
using InPlaceBody = std::function<Result<std::uint64_t>(MessageSink&)>;
using InPlaceFn = std::function<Status(std::uint64_t tag, const InPlaceBody& body)>;
Result<TranscodeReport> transcode_stream(const InputFn& next, const OutputFn& write,
                                         const TranscodeOptions& options, const EngineOptions& engine = {},
                                         const InPlaceFn& in_place = {});

}  // namespace daskcaps
