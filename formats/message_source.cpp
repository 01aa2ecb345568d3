#include "daskcaps/formats/message_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "formats/internal/capture.h"
#include "formats/internal/raw_stream.h"

namespace daskcaps::formats {

std::string_view to_string(InputFormat format) {
  switch (format) {
    case InputFormat::raw: return "raw";
    case InputFormat::pcap: return "pcap";
    case InputFormat::pcapng: return "pcapng";
  }
  return "raw";
}

const std::vector<ConnectionInfo>& MessageSource::connections() const {
  static const std::vector<ConnectionInfo> none;
  return none;
}

namespace {

class RawSource final : public MessageSource {
 public:
  explicit RawSource(std::unique_ptr<RawStreamReader> reader) : reader_(std::move(reader)) {}
  Result<std::optional<SourceMessage>> next() override {
    const std::size_t index = reader_->next_index();
    auto m = reader_->next();
    if (!m) return std::move(m).error();
    if (!*m) return std::optional<SourceMessage>{};
    SourceMessage out;
    out.raw = std::move(**m);
    out.index = index;
    out.at_stream_start = index == 0;
    return std::optional<SourceMessage>(std::move(out));
  }
  InputFormat format() const override { return InputFormat::raw; }

 private:
  std::unique_ptr<RawStreamReader> reader_;
};

class CaptureSource final : public MessageSource {
 public:
  explicit CaptureSource(std::unique_ptr<PcapMessageReader> reader) : reader_(std::move(reader)) {}
  Result<std::optional<SourceMessage>> next() override {
    auto m = reader_->next();
    if (!m) return std::move(m).error();
    if (!*m) return std::optional<SourceMessage>{};
    CaptureMessage& c = **m;
    SourceMessage out;
    out.raw = std::move(c.message.raw);
    out.index = index_++;
    out.skipped_before = c.message.skipped_before;
    out.connection = c.connection;
    out.direction = c.direction;
    out.timestamp = c.timestamp;
    out.at_stream_start = c.at_stream_start();
    return std::optional<SourceMessage>(std::move(out));
  }
  InputFormat format() const override {
    return reader_->format() == pcap::FileFormat::pcapng ? InputFormat::pcapng : InputFormat::pcap;
  }
  const std::vector<ConnectionInfo>& connections() const override { return reader_->connections(); }
  std::vector<Diagnostic> warnings() const override { return reader_->warnings(); }

 private:
  std::unique_ptr<PcapMessageReader> reader_;
  std::size_t index_ = 0;
};

// The first bytes of a file, to sniff its format; the file is opened again
// by its reader (so pipes other than standard input are not supported).
Result<Buffer> read_head(const std::string& path, std::size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, std::strerror(errno));
  Buffer head = Buffer::uninitialised(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t k = ::read(fd, head.data() + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int err = errno;
      ::close(fd);
      return make_error(Errc::io, std::strerror(err));
    }
    if (k == 0) break;
    got += static_cast<std::size_t>(k);
  }
  ::close(fd);
  head.resize_uninitialised(got);
  return head;
}

}  // namespace

Result<std::unique_ptr<MessageSource>> MessageSource::open(const std::string& path, const Limits& limits,
                                                           const SourceOptions& options) {
  if (path != "-") {
    auto head = read_head(path, 64);
    if (!head) {
      // A directory opens but does not read: let the raw reader say so.
      if (head.error().what != std::strerror(EISDIR)) return std::move(head).error();
      head = Buffer{};
    }
    if (PcapMessageReader::sniff(*head)) {
      auto r = PcapMessageReader::open(path, limits, options.capture);
      if (!r) return std::move(r).error();
      return std::unique_ptr<MessageSource>(new CaptureSource(std::move(*r)));
    }
    if (!head->empty() && !RawStreamReader::sniff(*head, limits))
      return make_error(Errc::bad_magic,
                        "not a pcap/pcapng capture or a Dask raw stream "
                        "(the first 16 bytes are no message prelude)",
                        0);
  }
  auto r = RawStreamReader::open(path, limits, options.store_bytes);
  if (!r) return std::move(r).error();
  return std::unique_ptr<MessageSource>(new RawSource(std::move(*r)));
}

}  // namespace daskcaps::formats
