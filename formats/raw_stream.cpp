#include "formats/raw_stream.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/wire/frames.h"

namespace daskcaps::formats {

Result<std::unique_ptr<RawStreamReader>> RawStreamReader::open(const std::string& path,
                                                               const Limits& limits) {
  std::FILE* f = nullptr;
  bool owned = true;
  if (path == "-") {
    f = stdin;
    owned = false;
  } else {
    f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return make_error(Errc::io, std::strerror(errno));
  }
  std::optional<std::uint64_t> size;
  struct stat st {};
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) size = static_cast<std::uint64_t>(st.st_size);
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    if (owned) std::fclose(f);
    return make_error(Errc::io, "is a directory");
  }
  return std::unique_ptr<RawStreamReader>(new RawStreamReader(f, owned, size, limits));
}

RawStreamReader::~RawStreamReader() {
  if (owned_ && file_ != nullptr) std::fclose(file_);
}

Result<std::size_t> RawStreamReader::read_some(std::uint8_t* into, std::size_t count) {
  const std::size_t got = std::fread(into, 1, count, file_);
  if (got < count && std::ferror(file_))
    return make_error(Errc::io, std::string("read failed: ") + std::strerror(errno), offset_);
  return got;
}

bool RawStreamReader::sniff(ByteSpan first_bytes, const Limits& limits) {
  if (first_bytes.size() < 16) return false;
  return plausible_prelude(first_bytes, limits, limits.max_frames);
}

Result<std::optional<StreamMessage>> RawStreamReader::next() {
  if (failed_) return make_error(Errc::internal, "reader used after an error", offset_);
  const std::uint64_t start = offset_;
  auto fail = [&](Error e) -> Result<std::optional<StreamMessage>> {
    failed_ = true;
    return e;
  };
  // Grow the buffer to what the decoder asks for, never beyond what the file
  // can still hold (when its size is known) or 64 MiB ahead of what arrived.
  auto owner = std::make_shared<Buffer>();
  Buffer& buf = *owner;
  std::uint64_t want = 16;
  for (;;) {
    if (buf.size() < want) {
      const std::uint64_t missing = want - buf.size();
      if (size_ && *size_ >= start && missing > *size_ - start - buf.size()) {
        // The file cannot hold what the prelude promises.
        if (buf.empty() && *size_ == start) return std::optional<StreamMessage>{};
        return fail(make_error(Errc::truncated,
                               "needs " + std::to_string(want) + " bytes, the file has " +
                                   std::to_string(*size_ - start) + " left",
                               start)
                        .add_context("message " + std::to_string(index_)));
      }
      const std::uint64_t step = std::min<std::uint64_t>(missing, std::uint64_t{64} << 20);
      const std::size_t old = buf.size();
      buf.resize(old + static_cast<std::size_t>(step));
      auto got = read_some(buf.data() + old, static_cast<std::size_t>(step));
      if (!got) return fail(std::move(got).error());
      buf.resize(old + *got);
      if (*got < step) {
        if (buf.empty()) return std::optional<StreamMessage>{};
        return fail(make_error(Errc::truncated,
                               "ends after " + std::to_string(buf.size()) + " of " +
                                   std::to_string(want) + " bytes",
                               start)
                        .add_context("message " + std::to_string(index_)));
      }
      if (buf.size() < want) continue;
    }
    auto step = decode_frames(buf, limits_, start);
    if (!step) return fail(std::move(step).error().add_context("message " + std::to_string(index_)));
    if (auto* more = std::get_if<NeedMore>(&*step)) {
      want = more->total;
      continue;
    }
    auto& framed = std::get<Framed>(*step);
    std::shared_ptr<const Buffer> shared = owner;
    StreamMessage msg;
    msg.offset = start;
    msg.wire_size = framed.wire_size;
    msg.short_length = framed.short_length;
    for (ByteSpan f : framed.frames) msg.frames.emplace_back(shared, f);
    offset_ = start + framed.wire_size;
    ++index_;
    return std::optional<StreamMessage>(std::move(msg));
  }
}

}  // namespace daskcaps::formats
