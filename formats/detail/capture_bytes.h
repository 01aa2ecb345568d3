// The bytes of a capture file as the pcap reader takes them
// (formats/internal/pcap.cpp): from memory, or from a file, buffered, in
// order, never all at once. A skip seeks where the file is regular and
// reads and drops elsewhere (a pipe), so memory never follows a length the
// file claims.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

// Internals of libdaskcaps: never exported from the shared library.
#pragma GCC visibility push(hidden)

namespace daskcaps::formats::pcap::detail {

class Source {
 public:
  virtual ~Source() = default;
  /// Reads up to n bytes; fewer only at the end of the input.
  virtual Result<std::size_t> read(std::uint8_t* dst, std::size_t n) = 0;
  /// Skips up to n bytes; fewer only at the end of the input.
  virtual Result<std::uint64_t> skip(std::uint64_t n) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(ByteSpan data) : data_(data) {}
  Result<std::size_t> read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t k = std::min(n, data_.size() - pos_);
    if (k > 0) std::memcpy(dst, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  Result<std::uint64_t> skip(std::uint64_t n) override {
    const std::uint64_t k = std::min<std::uint64_t>(n, data_.size() - pos_);
    pos_ += static_cast<std::size_t>(k);
    return k;
  }

 private:
  ByteSpan data_;
  std::size_t pos_ = 0;
};

class FileSource final : public Source {
 public:
  static Result<std::unique_ptr<FileSource>> open(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return make_error(Errc::io, "cannot open " + path + ": " + std::strerror(errno));
    auto src = std::unique_ptr<FileSource>(new FileSource(f, path));
    struct stat st {};
    if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
      src->seekable_ = true;
      src->size_ = static_cast<std::uint64_t>(st.st_size);
    }
    std::setvbuf(f, nullptr, _IOFBF, std::size_t{1} << 20);
    return src;
  }
  ~FileSource() override { std::fclose(f_); }

  Result<std::size_t> read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t k = std::fread(dst, 1, n, f_);
    if (k < n && std::ferror(f_)) return make_error(Errc::io, "cannot read " + path_ + ": " + std::strerror(errno), pos_ + k);
    pos_ += k;
    return k;
  }
  Result<std::uint64_t> skip(std::uint64_t n) override {
    if (seekable_) {
      const std::uint64_t left = size_ > pos_ ? size_ - pos_ : 0;
      const std::uint64_t k = std::min(n, left);
      if (::fseeko(f_, static_cast<off_t>(k), SEEK_CUR) != 0)
        return make_error(Errc::io, "cannot seek in " + path_ + ": " + std::strerror(errno), pos_);
      pos_ += k;
      return k;
    }
    std::uint8_t scratch[65536];
    std::uint64_t done = 0;
    while (done < n) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, sizeof scratch));
      auto got = read(scratch, want);
      if (!got) return std::move(got).error();
      done += *got;
      if (*got < want) break;
    }
    return done;
  }

 private:
  FileSource(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  std::FILE* f_;
  std::string path_;
  bool seekable_ = false;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
};

}  // namespace daskcaps::formats::pcap::detail

#pragma GCC visibility pop
