// Raw stream files: the bytes one side of a Dask TCP connection wrote, back
// to back, starting with its first message (usually the handshake, docs/protocol.md §2).
// There is no file header; the layout is exactly the wire's (docs/protocol.md §1.2):
//
//   message := L:u64le  n:u64le  len[n]:u64le  frame[0] .. frame[n-1]
//   file    := message*
//
// The reader feeds the file to a MessageAssembler (core/wire/internal/assembler.h),
// reading straight into the buffer each message ends up in: small messages
// into the staging chunk, a large one into its own buffer, never past its
// end. A promise larger than the file (or than Limits::max_message_bytes) is
// an error before any allocation; memory holds about one message. A file
// that ends inside a message is Errc::truncated with the offset of that
// message.
//
// Stored frames. Opened with a `store_bytes` (and a regular file), the
// reader does not read a message of that size or more whole: once its
// length table is in, it reads frame 0 and every sub-header that frame 0's
// placeholders name (with pread), and leaves the other frames in the file,
// to be read in pieces through the message's FrameStore
// (core/wire/internal/frame_store.h); then it goes on after the message's end. Such
// a message costs its head, not its size. The file must not change while
// its frames are wanted; one that has become shorter is Errc::io when read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "core/wire/internal/assembler.h"
#include "formats/internal/message_stream.h"

namespace daskcaps::formats {

class RawStreamReader {
 public:
  /// Opens a file ("-" reads standard input); `store_bytes` (0: never) as
  /// above.
  static Result<std::unique_ptr<RawStreamReader>> open(const std::string& path, const Limits& limits,
                                                       std::uint64_t store_bytes = 0);
  ~RawStreamReader();
  RawStreamReader(const RawStreamReader&) = delete;
  RawStreamReader& operator=(const RawStreamReader&) = delete;

  /// The next message, nullopt at a clean end of file, or an error.
  Result<std::optional<RawMessage>> next();
  /// Index the next message will get (0-based).
  std::size_t next_index() const { return index_; }
  /// Offset of the first byte not yet handed out in a message.
  std::uint64_t offset() const { return assembler_.offset(); }
  /// Size of the file when it is a regular file.
  std::optional<std::uint64_t> file_size() const { return size_; }

  /// True when these first bytes of a file could start a raw stream.
  static bool sniff(ByteSpan first_bytes, const Limits& limits);

 private:
  class File;
  RawStreamReader(int fd, bool owned, std::optional<std::uint64_t> size, const Limits& limits,
                  std::uint64_t store_bytes);
  Result<std::size_t> read_some(std::span<std::uint8_t> into);
  Result<RawMessage> stored_message(const MessageAssembler::Partial& p);

  std::shared_ptr<File> file_;  // shared with the stores of stored messages
  int fd_;
  bool owned_;
  Limits limits_;
  std::uint64_t store_bytes_;
  std::optional<std::uint64_t> size_;
  MessageAssembler assembler_;
  std::size_t index_ = 0;
  bool eof_ = false;
  bool failed_ = false;
};

}  // namespace daskcaps::formats
