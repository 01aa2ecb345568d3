#include "daskcaps/base/line_log.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

using namespace daskcaps;

namespace {

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

TEST_CASE("line_log: lines come out whole and in order") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    LineLog log(p[1]);
    for (int i = 0; i < 1000; ++i) log.write("line " + std::to_string(i));
    CHECK(log.flush_for(std::chrono::seconds(10)));
    CHECK(log.dropped() == 0);
  }
  ::close(p[1]);
  const std::string got = read_all(p[0]);
  ::close(p[0]);
  std::string want;
  for (int i = 0; i < 1000; ++i) want += "line " + std::to_string(i) + "\n";
  CHECK(got == want);
}

TEST_CASE("line_log: a reader that stops reading never blocks the writer; what was dropped is said") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::string got;
  {
    LineLog log(p[1], 64 << 10);
    // 10 MB into a pipe nobody reads: every write() returns.
    const std::string line(99, 'x');
    for (int i = 0; i < 100000; ++i) log.write(line);
    CHECK(log.dropped() > 90000);
    CHECK_FALSE(log.flush_for(std::chrono::milliseconds(50)));
    std::thread reader([&] { got = read_all(p[0]); });
    CHECK(log.flush_for(std::chrono::seconds(30)));
    log.write("after");
    CHECK(log.flush_for(std::chrono::seconds(30)));
    ::close(p[1]);
    reader.join();
  }
  ::close(p[0]);
  CHECK(got.find("log lines dropped: the output was not read)\nafter\n") != std::string::npos);
}
