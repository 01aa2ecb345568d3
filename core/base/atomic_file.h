// AtomicFile: an output file that appears under its name complete or not at
// all. Bytes go to a temporary file beside the target (same directory, so
// the final rename is atomic); commit() flushes it to disk and renames it
// over the target. Destroying an AtomicFile that was not committed removes
// the temporary file. A crash (SIGKILL, power loss) can leave only the
// temporary ".NAME.XXXXXX" file, never a partial NAME.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

class AtomicFile {
 public:
  /// Creates the temporary file. Errc::not_found when the directory does not
  /// exist, Errc::io otherwise; the error's context is `path`.
  static Result<std::unique_ptr<AtomicFile>> create(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes (retrying short writes). Errors keep the temp file until
  /// destruction.
  Status write(ByteSpan bytes);
  Status write(std::string_view text) { return write(as_bytes(text)); }
  /// Writes at `offset`, which may be past the end (a hole until written):
  /// for output whose first bytes are known last (a message recoded in
  /// place, core/recode/internal/stream_recode.h). Does not move where write()
  /// appends: resize() does.
  Status write_at(std::uint64_t offset, ByteSpan bytes);
  /// Reads back bytes written before (all of `into`, or Errc::io).
  Status read_at(std::uint64_t offset, std::span<std::uint8_t> into) const;
  /// Makes the file `size` bytes long (cutting what was written past it)
  /// and write() append from there.
  Status resize(std::uint64_t size);
  /// fsync, close and rename over the target.
  Status commit();
  /// Bytes written so far (the file's size).
  std::uint64_t size() const { return written_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  AtomicFile(std::string path, std::string temp, int fd) : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  Error fail(int err, std::string_view step) const;

  std::string path_;
  std::string temp_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

/// Writes a whole buffer atomically (create, write, commit).
Status write_file_atomically(const std::string& path, ByteSpan bytes);

}  // namespace daskcaps
