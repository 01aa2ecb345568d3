#include "daskcaps/formats/stream_outputs.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/wire/internal/message_sink.h"
#include "daskcaps/wire/frames.h"

namespace daskcaps::formats {

namespace {
// Pieces smaller than this are gathered before a write; larger frames are
// written straight from where they are.
constexpr std::size_t kWriteBufferBytes = std::size_t{256} << 10;

std::string safe_name(std::string s) {
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-')) c = '_';
  return s;
}
}  // namespace

struct StreamOutputs::File {
  std::unique_ptr<AtomicFile> file;
  OutputFile info;
  Buffer pending;  // bytes not yet written

  Status flush() {
    if (pending.empty()) return {};
    auto st = file->write(pending);
    pending.clear();
    return st;
  }
  Status put(ByteSpan bytes) {
    if (bytes.size() >= kWriteBufferBytes / 4) {
      if (auto st = flush(); !st) return st;
      return file->write(bytes);
    }
    if (pending.size() + bytes.size() > kWriteBufferBytes) {
      if (auto st = flush(); !st) return st;
    }
    pending.append(bytes);
    return {};
  }
};

struct StreamOutputs::Files {
  mutable std::mutex mu;                     // guards list (not the files' contents)
  std::vector<std::unique_ptr<File>> list;  // stable addresses
};

StreamOutputs::StreamOutputs(std::string path, bool split, TempHooks hooks)
    : path_(std::move(path)), split_(split), hooks_(std::move(hooks)), files_(std::make_unique<Files>()) {}

StreamOutputs::~StreamOutputs() = default;

Result<std::unique_ptr<StreamOutputs>> StreamOutputs::create(const std::string& path, bool split, TempHooks hooks) {
  std::unique_ptr<StreamOutputs> out(new StreamOutputs(path, split, std::move(hooks)));
  if (split) {
    if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
      return make_error(Errc::io, std::strerror(errno)).add_context(path);
  } else {
    auto slot = out->open_file(path, std::nullopt, std::nullopt);
    if (!slot) return std::move(slot).error();
  }
  return out;
}

Result<StreamOutputs::Slot> StreamOutputs::open_file(std::string path, std::optional<std::size_t> connection,
                                                     std::optional<Direction> direction) {
  if (hooks_.before) hooks_.before();
  auto f = AtomicFile::create(path);
  if (hooks_.after) hooks_.after(f ? (*f)->temp_path() : std::string());
  if (!f) return std::move(f).error();
  auto file = std::make_unique<File>();
  file->info.path = (*f)->path();
  file->info.connection = connection;
  file->info.direction = direction;
  file->file = std::move(*f);
  std::lock_guard<std::mutex> lock(files_->mu);
  files_->list.push_back(std::move(file));
  return files_->list.size() - 1;
}

Result<StreamOutputs::Slot> StreamOutputs::route(const SourceMessage& message,
                                                 const std::vector<ConnectionInfo>& connections) {
  if (!split_ || !message.connection) return Slot{0};
  const std::size_t conn = *message.connection;
  const Direction dir = message.direction.value_or(Direction::client_to_server);
  const std::pair<std::size_t, int> key{conn, static_cast<int>(dir)};
  if (auto it = keys_.find(key); it != keys_.end()) return it->second;
  std::string name = "conn" + std::to_string(conn);
  if (conn < connections.size()) {
    const ConnectionInfo& c = connections[conn];
    const bool c2s = dir == Direction::client_to_server;
    name += '-';
    name += safe_name(c2s ? c.client : c.server);
    name += "-to-";
    name += safe_name(c2s ? c.server : c.client);
  }
  auto slot = open_file(path_ + "/" + name + ".stream", conn, dir);
  if (!slot) return std::move(slot).error();
  keys_.emplace(key, *slot);
  return *slot;
}

Status StreamOutputs::write(Slot slot, std::span<const Bytes> frames) {
  File* f = nullptr;
  {
    std::lock_guard<std::mutex> lock(files_->mu);
    if (slot >= files_->list.size()) return make_error(Errc::internal, "no output file " + std::to_string(slot));
    f = files_->list[slot].get();
  }
  std::vector<std::uint64_t> lengths;
  lengths.reserve(frames.size());
  for (const Bytes& b : frames) lengths.push_back(b.size());
  const Buffer prelude = encode_prelude(lengths);
  if (auto st = f->put(prelude); !st) return st;
  for (const Bytes& b : frames)
    if (auto st = f->put(b.span()); !st) return st;
  ++f->info.messages;
  f->info.bytes += message_wire_size(frames);
  return {};
}

namespace {
// A message written in place at `base` of a file: contiguous writes are
// gathered into one buffer, written when a write lands elsewhere, before a
// move, and at the end.
class FileMessageSink final : public MessageSink {
 public:
  FileMessageSink(AtomicFile& file, std::uint64_t base) : file_(file), base_(base) {}

  Status write_at(std::uint64_t at, ByteSpan bytes) override {
    if (bytes.empty()) return ok_status();
    if (!pending_.empty() && at != pending_at_ + pending_.size()) {
      if (Status s = flush(); !s) return s;
    }
    if (pending_.empty()) pending_at_ = at;
    if (bytes.size() >= kWriteBufferBytes) {
      if (Status s = flush(); !s) return s;
      return file_.write_at(base_ + at, bytes);
    }
    if (pending_.size() + bytes.size() > kWriteBufferBytes) {
      if (Status s = flush(); !s) return s;
      pending_at_ = at;
    }
    pending_.append(bytes.data(), bytes.size());
    return ok_status();
  }

  Status move(std::uint64_t from, std::uint64_t to, std::uint64_t length) override {
    if (Status s = flush(); !s) return s;
    if (from == to || length == 0) return ok_status();
    Buffer step = Buffer::uninitialised(static_cast<std::size_t>(std::min<std::uint64_t>(length, kWriteBufferBytes)));
    // Moving back, the front goes first; moving on, the back does.
    for (std::uint64_t done = 0; done < length;) {
      const std::uint64_t k = std::min<std::uint64_t>(step.size(), length - done);
      const std::uint64_t off = to < from ? done : length - done - k;
      std::span<std::uint8_t> piece(step.data(), static_cast<std::size_t>(k));
      if (Status s = file_.read_at(base_ + from + off, piece); !s) return s;
      if (Status s = file_.write_at(base_ + to + off, piece); !s) return s;
      done += k;
    }
    return ok_status();
  }

  Status flush() {
    if (pending_.empty()) return ok_status();
    Status s = file_.write_at(base_ + pending_at_, pending_);
    pending_.clear();
    return s;
  }

 private:
  AtomicFile& file_;
  std::uint64_t base_;
  Buffer pending_;
  std::uint64_t pending_at_ = 0;
};
}  // namespace

Status StreamOutputs::write_in_place(Slot slot, const std::function<Result<std::uint64_t>(MessageSink&)>& body) {
  File* f = nullptr;
  {
    std::lock_guard<std::mutex> lock(files_->mu);
    if (slot >= files_->list.size()) return make_error(Errc::internal, "no output file " + std::to_string(slot));
    f = files_->list[slot].get();
  }
  if (Status s = f->flush(); !s) return s;
  const std::uint64_t base = f->file->size();
  FileMessageSink sink(*f->file, base);
  auto size = body(sink);
  if (!size) return std::move(size).error();
  if (Status s = sink.flush(); !s) return s;
  if (Status s = f->file->resize(base + *size); !s) return s;
  ++f->info.messages;
  f->info.bytes += *size;
  return {};
}

Status StreamOutputs::commit() {
  std::lock_guard<std::mutex> lock(files_->mu);
  for (auto& f : files_->list) {
    if (auto st = f->flush(); !st) return st;
    if (auto st = f->file->commit(); !st) return st;
  }
  return {};
}

void StreamOutputs::abort() {
  std::lock_guard<std::mutex> lock(files_->mu);
  files_->list.clear();  // an AtomicFile not committed removes its temporary file
  keys_.clear();
}

std::vector<OutputFile> StreamOutputs::files() const {
  std::lock_guard<std::mutex> lock(files_->mu);
  std::vector<OutputFile> out;
  for (const auto& f : files_->list) out.push_back(f->info);
  return out;
}

}  // namespace daskcaps::formats
