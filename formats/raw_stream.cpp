#include "daskcaps/formats/raw_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace daskcaps::formats {

namespace {
// Files are read in larger steps than sockets: fewer system calls.
constexpr std::size_t kFileChunkBytes = std::size_t{256} << 10;

MessageAssembler::Options assembler_options(std::optional<std::uint64_t> size) {
  MessageAssembler::Options o;
  o.stream_bytes = size;
  o.stream_noun = "file";
  o.chunk_bytes = kFileChunkBytes;
  return o;
}
}  // namespace

RawStreamReader::RawStreamReader(int fd, bool owned, std::optional<std::uint64_t> size, const Limits& limits)
    : fd_(fd), owned_(owned), size_(size), assembler_(limits, assembler_options(size)) {}

Result<std::unique_ptr<RawStreamReader>> RawStreamReader::open(const std::string& path,
                                                               const Limits& limits) {
  int fd = 0;
  bool owned = true;
  if (path == "-") {
    owned = false;
  } else {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error(Errc::io, std::strerror(errno));
  }
  std::optional<std::uint64_t> size;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (owned) ::close(fd);
    return make_error(Errc::io, "is a directory");
  }
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) size = static_cast<std::uint64_t>(st.st_size);
  return std::unique_ptr<RawStreamReader>(new RawStreamReader(fd, owned, size, limits));
}

RawStreamReader::~RawStreamReader() {
  if (owned_ && fd_ >= 0) ::close(fd_);
}

Result<std::size_t> RawStreamReader::read_some(std::span<std::uint8_t> into) {
  for (;;) {
    const ssize_t got = ::read(fd_, into.data(), into.size());
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno == EINTR) continue;
    return make_error(Errc::io, std::string("read failed: ") + std::strerror(errno), assembler_.offset());
  }
}

bool RawStreamReader::sniff(ByteSpan first_bytes, const Limits& limits) {
  if (first_bytes.size() < 16) return false;
  return plausible_prelude(first_bytes, limits, limits.max_frames);
}

Result<std::optional<StreamMessage>> RawStreamReader::next() {
  if (failed_) return make_error(Errc::internal, "reader used after an error", offset());
  auto fail = [&](Error e) -> Result<std::optional<StreamMessage>> {
    failed_ = true;
    return e.add_context("message " + std::to_string(index_));
  };
  for (;;) {
    auto m = assembler_.next();
    if (!m) return fail(std::move(m).error());
    if (*m) {
      StreamMessage msg;
      msg.offset = (*m)->offset;
      msg.wire_size = (*m)->wire_size;
      msg.short_length = (*m)->short_length;
      msg.frames = std::move((*m)->frames);
      msg.storage = std::move((*m)->storage);
      ++index_;
      return std::optional<StreamMessage>(std::move(msg));
    }
    if (eof_) {
      if (assembler_.at_boundary()) return std::optional<StreamMessage>{};
      const std::uint64_t want = assembler_.expected();
      return fail(make_error(Errc::truncated,
                             "ends after " + std::to_string(assembler_.buffered()) + " of " +
                                 (want ? std::to_string(want) : std::string("at least 16")) + " bytes",
                             assembler_.offset()));
    }
    auto got = read_some(assembler_.buffer());
    if (!got) return fail(std::move(got).error());
    if (*got == 0) eof_ = true;
    assembler_.commit(*got);
  }
}

}  // namespace daskcaps::formats
