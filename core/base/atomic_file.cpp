#include "daskcaps/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace daskcaps {

Error AtomicFile::fail(int err, std::string_view step) const {
  Error e = make_error(err == ENOENT || err == ENOTDIR ? Errc::not_found : Errc::io,
                       std::string(step) + ": " + std::strerror(err));
  e.add_context(path_);
  return e;
}

Result<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  AtomicFile probe(path, "", -1);
  if (name.empty() || name == "." || name == "..") return probe.fail(EISDIR, "cannot write");
  std::string temp = dir + (dir.back() == '/' ? "" : "/") + "." + name + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return probe.fail(errno, "cannot create a temporary file beside it");
  // mkstemp makes 0600; give the file the mode an ordinary create would.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    return probe.fail(err, "cannot set mode");
  }
  return std::unique_ptr<AtomicFile>(new AtomicFile(path, std::move(temp), fd));
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

Status AtomicFile::write(ByteSpan bytes) {
  if (fd_ < 0) return make_error(Errc::internal, "write after commit");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno, "cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  written_ += done;
  return {};
}

Status AtomicFile::write_at(std::uint64_t offset, ByteSpan bytes) {
  if (fd_ < 0) return make_error(Errc::internal, "write after commit");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno, "cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Status AtomicFile::read_at(std::uint64_t offset, std::span<std::uint8_t> into) const {
  if (fd_ < 0) return make_error(Errc::internal, "read after commit");
  std::size_t done = 0;
  while (done < into.size()) {
    const ssize_t n = ::pread(fd_, into.data() + done, into.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno, "cannot read back");
    if (n == 0) return fail(EIO, "cannot read back");
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Status AtomicFile::resize(std::uint64_t size) {
  if (fd_ < 0) return make_error(Errc::internal, "resize after commit");
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return fail(errno, "cannot resize");
  if (::lseek(fd_, static_cast<off_t>(size), SEEK_SET) < 0) return fail(errno, "cannot seek");
  written_ = size;
  return {};
}

Status AtomicFile::commit() {
  if (fd_ < 0) return make_error(Errc::internal, "commit twice");
  if (::fsync(fd_) != 0) return fail(errno, "cannot flush");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return fail(errno, "cannot write");
  if (::rename(temp_.c_str(), path_.c_str()) != 0) return fail(errno, "cannot replace");
  committed_ = true;
  return {};
}

Status write_file_atomically(const std::string& path, ByteSpan bytes) {
  auto f = AtomicFile::create(path);
  if (!f) return std::move(f).error();
  if (auto st = (*f)->write(bytes); !st) return st;
  return (*f)->commit();
}

}  // namespace daskcaps
