#include "formats/internal/raw_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "core/wire/internal/message_layout.h"
#include "core/wire/internal/frame_store.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

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

// The file, open as long as the reader or a stored message's frames need it.
class RawStreamReader::File {
 public:
  File(int fd, bool owned) : fd_(fd), owned_(owned) {}
  ~File() {
    if (owned_ && fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  /// Reads [at, at + into.size()) of the file, all of it or up to its end.
  Result<std::size_t> pread_all(std::uint64_t at, std::span<std::uint8_t> into) const {
    std::size_t got = 0;
    while (got < into.size()) {
      const ssize_t k = ::pread(fd_, into.data() + got, into.size() - got, static_cast<off_t>(at + got));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return make_error(Errc::io, std::string("read failed: ") + std::strerror(errno), at + got);
      if (k == 0) break;
      got += static_cast<std::size_t>(k);
    }
    return got;
  }

 private:
  int fd_;
  bool owned_;
};

namespace {
// The frames of one stored message, read from the reader's file.
class MessageFrames final : public FrameStore {
 public:
  using Reader = std::function<Result<std::size_t>(std::uint64_t, std::span<std::uint8_t>)>;
  MessageFrames(Reader read, std::vector<std::uint64_t> starts, std::vector<std::uint64_t> sizes)
      : read_(std::move(read)), starts_(std::move(starts)), sizes_(std::move(sizes)) {}
  Result<std::size_t> read(std::size_t index, std::uint64_t at, std::span<std::uint8_t> into) const override {
    if (index >= sizes_.size() || at > sizes_[index])
      return make_error(Errc::internal, "no bytes " + std::to_string(at) + " of frame " + std::to_string(index));
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(into.size(), sizes_[index] - at));
    auto got = read_(starts_[index] + at, into.first(n));
    if (!got) return got;
    if (*got < n)
      return make_error(Errc::io, "the file ends inside frame " + std::to_string(index) + " (has it changed?)",
                        starts_[index] + at + *got);
    return got;
  }

 private:
  Reader read_;
  std::vector<std::uint64_t> starts_;
  std::vector<std::uint64_t> sizes_;
};
}  // namespace

RawStreamReader::RawStreamReader(int fd, bool owned, std::optional<std::uint64_t> size, const Limits& limits,
                                 std::uint64_t store_bytes)
    : file_(std::make_shared<File>(fd, owned)),
      fd_(fd),
      owned_(owned),
      limits_(limits),
      store_bytes_(owned && size ? store_bytes : 0),
      size_(size),
      assembler_(limits, assembler_options(size)) {}

Result<std::unique_ptr<RawStreamReader>> RawStreamReader::open(const std::string& path, const Limits& limits,
                                                               std::uint64_t store_bytes) {
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
  return std::unique_ptr<RawStreamReader>(new RawStreamReader(fd, owned, size, limits, store_bytes));
}

RawStreamReader::~RawStreamReader() = default;  // the file closes with its last store

Result<std::size_t> RawStreamReader::read_some(std::span<std::uint8_t> into) {
  for (;;) {
    const ssize_t got = ::read(fd_, into.data(), into.size());
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno == EINTR) continue;
    return make_error(Errc::io, std::string("read failed: ") + std::strerror(errno), assembler_.offset());
  }
}

Result<RawMessage> RawStreamReader::stored_message(const MessageAssembler::Partial& p) {
  const std::size_t n = p.lengths.size();
  std::vector<std::uint64_t> starts(n);
  std::uint64_t at = p.offset + prelude_size(n);
  for (std::size_t i = 0; i < n; ++i) {
    starts[i] = at;
    at += p.lengths[i];
  }
  const std::shared_ptr<File> file = file_;
  auto read = [file](std::uint64_t from, std::span<std::uint8_t> into) { return file->pread_all(from, into); };
  auto load = [&](std::size_t i) -> Result<Bytes> {
    Buffer b = Buffer::uninitialised(static_cast<std::size_t>(p.lengths[i]));
    auto got = read(starts[i], b);
    if (!got) return std::move(got).error();
    if (*got < b.size())
      return make_error(Errc::truncated, "the file ends inside frame " + std::to_string(i), starts[i] + *got);
    return Bytes(std::move(b));
  };
  RawMessage msg;
  msg.offset = p.offset;
  msg.wire_size = p.wire_size;
  std::uint64_t declared = 0;
  std::memcpy(&declared, p.have.data(), 8);
  msg.short_length = declared != p.wire_size - 8;
  msg.frames.reserve(n);
  for (std::uint64_t length : p.lengths) msg.frames.push_back(WireFrame::stored(length));
  if (n > 0) {
    // Frame 0, then the sub-headers its placeholders name; a frame 0 that
    // does not decode is left to the parser to report.
    auto f0 = load(0);
    if (!f0) return std::move(f0).error();
    msg.frames[0] = std::move(*f0);
    if (auto root = msgpack::decode_all(msg.frames[0].bytes().span(), limits_, starts[0])) {
      for (const auto& [kind, k] : placeholder_frames(*root)) {
        if (k == 0 || k >= n || !msg.frames[static_cast<std::size_t>(k)].is_stored()) continue;
        auto h = load(static_cast<std::size_t>(k));
        if (!h) return std::move(h).error();
        msg.frames[static_cast<std::size_t>(k)] = std::move(*h);
      }
    }
  }
  msg.store = std::make_shared<MessageFrames>(read, std::move(starts), p.lengths);
  // Go on after the message.
  const std::uint64_t end = p.offset + p.wire_size;
  assembler_.restart_at(end);
  if (::lseek(fd_, static_cast<off_t>(end), SEEK_SET) < 0)
    return make_error(Errc::io, std::string("seek failed: ") + std::strerror(errno), end);
  return msg;
}

bool RawStreamReader::sniff(ByteSpan first_bytes, const Limits& limits) {
  if (first_bytes.size() < 16) return false;
  return plausible_prelude(first_bytes, limits, limits.max_frames);
}

Result<std::optional<RawMessage>> RawStreamReader::next() {
  if (failed_) return make_error(Errc::internal, "reader used after an error", offset());
  auto fail = [&](Error e) -> Result<std::optional<RawMessage>> {
    failed_ = true;
    return e.add_context("message " + std::to_string(index_));
  };
  for (;;) {
    auto m = assembler_.next();
    if (!m) return fail(std::move(m).error());
    if (*m) {
      ++index_;
      return std::move(*m);
    }
    if (store_bytes_ > 0 && assembler_.expected() >= store_bytes_) {
      if (auto p = assembler_.partial()) {
        auto msg = stored_message(*p);
        if (!msg) return fail(std::move(msg).error());
        ++index_;
        return std::optional<RawMessage>(std::move(*msg));
      }
    }
    if (eof_) {
      if (assembler_.at_boundary()) return std::optional<RawMessage>{};
      const std::uint64_t want = assembler_.expected();
      return fail(make_error(Errc::truncated,
                             "ends after " + std::to_string(assembler_.buffered()) + " of " +
                                 (want ? std::to_string(want) : std::string("at least 16")) + " bytes",
                             assembler_.offset()));
    }
    std::span<std::uint8_t> room = assembler_.buffer();
    // A message to store is read a chunk at a time, to its length table.
    if (store_bytes_ > 0 && assembler_.expected() >= store_bytes_) room = room.first(std::min(room.size(), kFileChunkBytes));
    auto got = read_some(room);
    if (!got) return fail(std::move(got).error());
    if (*got == 0) eof_ = true;
    assembler_.commit(*got);
  }
}

}  // namespace daskcaps::formats
