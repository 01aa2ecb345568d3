// Raw stream files: the bytes one side of a Dask TCP connection wrote, back
// to back, starting with its first message (usually the handshake, §2).
// There is no file header; the layout is exactly the wire's (spec §1.2):
//
//   message := L:u64le  n:u64le  len[n]:u64le  frame[0] .. frame[n-1]
//   file    := message*
//
// The reader feeds the file to a MessageAssembler (core/wire/assembler.h),
// reading straight into the buffer each message ends up in: small messages
// into the staging chunk, a large one into its own buffer, never past its
// end. A promise larger than the file (or than Limits::max_message_bytes) is
// an error before any allocation; memory holds about one message. A file
// that ends inside a message is Errc::truncated with the offset of that
// message.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/assembler.h"
#include "daskcaps/formats/message_stream.h"

namespace daskcaps::formats {

class RawStreamReader {
 public:
  /// Opens a file ("-" reads standard input).
  static Result<std::unique_ptr<RawStreamReader>> open(const std::string& path, const Limits& limits);
  ~RawStreamReader();
  RawStreamReader(const RawStreamReader&) = delete;
  RawStreamReader& operator=(const RawStreamReader&) = delete;

  /// The next message, nullopt at a clean end of file, or an error.
  Result<std::optional<StreamMessage>> next();
  /// Index the next message will get (0-based).
  std::size_t next_index() const { return index_; }
  /// Offset of the first byte not yet handed out in a message.
  std::uint64_t offset() const { return assembler_.offset(); }
  /// Size of the file when it is a regular file.
  std::optional<std::uint64_t> file_size() const { return size_; }

  /// True when these first bytes of a file could start a raw stream.
  static bool sniff(ByteSpan first_bytes, const Limits& limits);

 private:
  RawStreamReader(int fd, bool owned, std::optional<std::uint64_t> size, const Limits& limits);
  Result<std::size_t> read_some(std::span<std::uint8_t> into);

  int fd_;
  bool owned_;
  std::optional<std::uint64_t> size_;
  MessageAssembler assembler_;
  std::size_t index_ = 0;
  bool eof_ = false;
  bool failed_ = false;
};

}  // namespace daskcaps::formats
