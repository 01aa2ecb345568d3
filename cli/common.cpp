#include "cli/common.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace daskcaps::cli {

int exit_code_for(Errc code) {
  switch (code) {
    case Errc::network:
    case Errc::refused:
    case Errc::timeout:
    case Errc::tls:
    case Errc::protocol:
      return kExitNetwork;
    case Errc::usage:
      return kExitUsage;
    default:
      return kExitBadInput;
  }
}

void print_error_line(std::string_view text) {
  std::fflush(stdout);
  std::cerr << "dask-caps: " << text << '\n';
}

int report_error(std::string_view subject, const Error& error) {
  std::string line;
  if (!subject.empty()) {
    line += subject;
    line += ": ";
  }
  line += error.message();
  print_error_line(line);
  return exit_code_for(error.code);
}

Json json_document(std::string_view schema) {
  Json doc = Json::object();
  doc["schema"] = schema;
  return doc;
}

void print_json(const Json& doc) {
  std::cout << doc.dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  auto fail = [&path](int err, std::string_view step) {
    Error e = make_error(err == ENOENT || err == ENOTDIR ? Errc::not_found : Errc::io,
                         std::string(step) + ": " + std::strerror(err));
    return std::move(e.add_context(path));
  };
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return fail(EISDIR, "cannot write");

  // O_EXCL with mode 0666 rather than mkstemp (0600): the kernel applies the
  // umask, so the file gets the mode an ordinary create would, without
  // touching the process-wide umask.
  static std::atomic<unsigned> counter{0};
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    const auto tick = std::chrono::steady_clock::now().time_since_epoch().count();
    temp = dir + (dir.back() == '/' ? "" : "/") + "." + name + "." + std::to_string(::getpid()) +
           "." + std::to_string(counter++) + "." + std::to_string(tick % 100000);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return fail(errno, "cannot create a temporary file beside it");

  auto abandon = [&](int err, std::string_view step) {
    ::close(fd);
    ::unlink(temp.c_str());
    return fail(err, step);
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return abandon(errno, "cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return abandon(errno, "cannot flush");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return fail(err, "cannot write");
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return fail(err, "cannot replace");
  }
  // Make the rename itself durable; a failure here changes nothing visible.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return ok_status();
}

void add_limit_flags(CLI::App& cmd, Limits& limits) {
  cmd.add_option("--max-message-bytes", limits.max_message_bytes,
                 "largest Dask message accepted, prelude and frames")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-frames", limits.max_frames, "most frames in one message")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-decompressed-bytes", limits.max_decompressed_bytes,
                 "largest output of decompressing one frame")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-msgpack-depth", limits.max_msgpack_depth, "deepest msgpack nesting")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-msgpack-container", limits.max_msgpack_container,
                 "most elements in one msgpack array or map")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-depth", limits.max_pickle_depth, "deepest pickle nesting")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-memo", limits.max_pickle_memo, "most pickle memo entries")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-stack", limits.max_pickle_stack, "deepest pickle machine stack")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-output-bytes", limits.max_pickle_output_bytes,
                 "largest pickle written")
      ->capture_default_str()->group("Limits");
}

}  // namespace daskcaps::cli
