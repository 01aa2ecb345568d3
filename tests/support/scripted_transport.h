// Test helper: a net::Transport that replays scripted chunks from the peer
// and records what was written (docs/design.md §9.3). After the last chunk it
// reports end of stream, or a timeout when `stall_at_end` is set (a peer
// that stops sending but keeps the connection open).
#pragma once

#include <algorithm>
#include <deque>
#include <string>

#include "daskcaps/base/bytes.h"
#include "core/net/internal/socket.h"

namespace testsupport {

class ScriptedTransport final : public daskcaps::net::Transport {
 public:
  ScriptedTransport() = default;
  /// One chunk per read call, at most as large as the reader's buffer.
  void add_chunk(daskcaps::ByteSpan chunk) { chunks_.emplace_back(chunk.begin(), chunk.end()); }
  /// The bytes split into chunks of `size` bytes (1: byte at a time).
  void add_split(daskcaps::ByteSpan bytes, std::size_t size) {
    for (std::size_t i = 0; i < bytes.size(); i += size)
      add_chunk(bytes.subspan(i, std::min(size, bytes.size() - i)));
  }
  void stall_at_end() { stall_ = true; }

  daskcaps::Result<std::size_t> read_some(std::span<std::uint8_t> out,
                                          daskcaps::net::Deadline) override {
    ++reads_;
    if (chunks_.empty()) {
      if (stall_) return daskcaps::make_error(daskcaps::Errc::timeout, "timed out (scripted)");
      return std::size_t{0};
    }
    auto& front = chunks_.front();
    const std::size_t n = std::min(out.size(), front.size());
    std::copy_n(front.begin(), n, out.begin());
    front.erase_front(n);
    if (front.empty()) chunks_.pop_front();
    return n;
  }
  daskcaps::Status write_all(daskcaps::ByteSpan data, daskcaps::net::Deadline) override {
    written_.append(data);
    return daskcaps::ok_status();
  }
  void close() override { closed_ = true; }
  std::string peer() const override { return "127.0.0.1:8786"; }

  const daskcaps::Buffer& written() const { return written_; }
  bool closed() const { return closed_; }
  std::size_t reads() const { return reads_; }

 private:
  std::deque<daskcaps::Buffer> chunks_;
  daskcaps::Buffer written_;
  bool stall_ = false;
  bool closed_ = false;
  std::size_t reads_ = 0;
};

}  // namespace testsupport
