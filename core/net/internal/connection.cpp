#include "core/net/internal/connection.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "core/net/internal/resolve.h"
#include "core/net/detail/sys.h"
#include "daskcaps/net/tls.h"

namespace daskcaps::net {

namespace {

/// Output entries written by one writev.
constexpr std::size_t kMaxGather = 64;

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

}  // namespace

Connection::Connection(Loop& loop, Handler& handler, const ConnectionOptions& options)
    : loop_(loop), handler_(&handler), options_(options), token_(std::make_shared<Connection*>(this)) {
  if (options_.max_read_per_wakeup == 0) options_.max_read_per_wakeup = 1;
  if (options_.handshake_timeout.count() > 0)
    handshake_timer_ = loop_.add_timer(options_.handshake_timeout, [this, t = token_] {
      if (*t) on_handshake_timeout();
    });
}

Connection::~Connection() {
  close();
  *token_ = nullptr;
}

std::unique_ptr<Connection> Connection::connect(Loop& loop, const Address& address, Handler& handler,
                                                const ConnectionOptions& options, const TlsClientContext* tls,
                                                std::vector<sockaddr_storage> resolved) {
  std::unique_ptr<Connection> c(new Connection(loop, handler, options));
  c->peer_ = address.host_port();
  c->host_ = address.host;
  c->want_tls_ = address.scheme == Scheme::tls;
  c->client_tls_ = tls;
  if (c->want_tls_ && !tls) {
    loop.defer([conn = c.get(), t = c->token_] {
      if (*t) conn->fail(make_error(Errc::usage, "a tls:// address needs TLS settings"));
    });
    return c;
  }
  if (!resolved.empty()) {
    for (auto& sa : resolved) set_port(sa, address.port);
    c->stage_ = Stage::connecting;
    c->addrs_ = std::move(resolved);
    loop.defer([conn = c.get(), t = c->token_] {
      if (*t) conn->try_next_address();
    });
    return c;
  }
  c->resolve_ = resolve_async(loop, address, [conn = c.get()](Result<std::vector<sockaddr_storage>> r) {
    conn->on_resolved(std::move(r));  // the request dies with the connection
  });
  return c;
}

std::unique_ptr<Connection> Connection::accepted(Loop& loop, Socket socket, Handler& handler,
                                                 const ConnectionOptions& options, const TlsServerContext* tls) {
  std::unique_ptr<Connection> c(new Connection(loop, handler, options));
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(socket.fd(), reinterpret_cast<sockaddr*>(&sa), &len) == 0) c->peer_ = sockaddr_text(sa);
  c->stage_ = Stage::handshaking;
  std::unique_ptr<Stream> stream;
  if (tls) {
    auto wrapped = tls->wrap(std::move(socket));
    if (!wrapped) {
      loop.defer([conn = c.get(), t = c->token_, e = std::move(wrapped).error()]() mutable {
        if (*t) conn->fail(std::move(e));
      });
      return c;
    }
    stream = std::move(*wrapped);
  } else {
    stream = make_plain_stream(std::move(socket));
  }
  c->stream_ = std::move(stream);
  if (!c->register_fd(0)) return c;
  loop.defer([conn = c.get(), t = c->token_] {
    if (*t && conn->stage_ == Stage::handshaking) conn->do_handshake();
  });
  return c;
}

void Connection::unregister_fd() {
  if (reg_fd_ >= 0) loop_.remove(reg_fd_);
  reg_fd_ = -1;
}

int Connection::fd() const {
  if (stream_) return stream_->fd();
  return connecting_.fd();
}

std::optional<LinkFigures> Connection::link_figures() const {
  if (!stream_ || stage_ == Stage::closed) return std::nullopt;
  const int f = stream_->fd();
  if (f < 0) return std::nullopt;
  return read_link_figures(f);
}

std::string Connection::peer_ip() const { return stream_ ? stream_->peer_ip() : std::string(); }
std::string Connection::local_ip() const { return stream_ ? stream_->local_ip() : std::string(); }

bool Connection::register_fd(std::uint32_t interest) {
  if (reg_fd_ >= 0) {
    loop_.set_interest(reg_fd_, interest);
    return true;
  }
  auto st = loop_.add(fd(), interest, [this, t = token_](std::uint32_t ready) {
    if (*t) on_ready(ready);
  });
  if (!st) {
    // Reported later, as every outcome is.
    loop_.defer([this, t = token_, e = std::move(st).error()]() mutable {
      if (*t) fail(std::move(e));
    });
    return false;
  }
  reg_fd_ = fd();
  return true;
}

// ---- connecting ----------------------------------------------------------

void Connection::on_resolved(Result<std::vector<sockaddr_storage>> r) {
  if (stage_ != Stage::resolving) return;
  if (!r) {
    fail(std::move(r).error());
    return;
  }
  addrs_ = std::move(*r);
  stage_ = Stage::connecting;
  try_next_address();
}

void Connection::try_next_address() {
  last_error_ = make_error(Errc::network, "no address to connect to");
  while (next_addr_ < addrs_.size()) {
    auto s = start_connect(addrs_[next_addr_++]);
    if (!s) {
      last_error_ = std::move(s).error();
      continue;
    }
    connecting_ = std::move(*s);
    register_fd(Loop::kWritable);
    return;
  }
  fail(std::move(last_error_));
}

void Connection::on_connect_ready() {
  auto st = finish_connect(connecting_, peer_);
  if (!st) {
    unregister_fd();
    connecting_.reset();
    if (next_addr_ < addrs_.size()) {
      try_next_address();
      return;
    }
    fail(st.error());
    return;
  }
  if (want_tls_) {
    auto wrapped = client_tls_->wrap(std::move(connecting_), host_);
    if (!wrapped) {
      fail(std::move(wrapped).error());
      return;
    }
    start_stream(std::move(*wrapped));
  } else {
    start_stream(make_plain_stream(std::move(connecting_)));
  }
}

void Connection::start_stream(std::unique_ptr<Stream> stream) {
  // Same fd as the connecting socket: the registration stays.
  stream_ = std::move(stream);
  stage_ = Stage::handshaking;
  do_handshake();
}

void Connection::do_handshake() {
  IoStep step = stream_->handshake();
  switch (step.kind) {
    case IoStep::Kind::done: become_open(); return;
    case IoStep::Kind::want_read: handshake_wants_ = Loop::kReadable; break;
    case IoStep::Kind::want_write: handshake_wants_ = Loop::kWritable; break;
    case IoStep::Kind::eof:
      fail(make_error(Errc::tls, "the peer closed the connection during the TLS handshake"));
      return;
    case IoStep::Kind::error: fail(std::move(step.error)); return;
  }
  update_interest();
}

void Connection::become_open() {
  stage_ = Stage::open;
  loop_.cancel_timer(handshake_timer_);
  last_active_ = Clock::now();
  if (options_.idle_timeout.count() > 0) arm_idle_timer(last_active_ + options_.idle_timeout);
  update_interest();
  const Token t = token_;
  handler_->on_open(*this);
  if (!*t || stage_ != Stage::open) return;
  if (out_head_ < out_.size() || finishing_ || close_after_flush_) flush();
}

void Connection::on_handshake_timeout() {
  handshake_timer_ = Timer{};
  switch (stage_) {
    case Stage::resolving: fail(make_error(Errc::timeout, "resolving host \"" + host_ + "\" timed out")); return;
    case Stage::connecting: fail(make_error(Errc::timeout, "connecting to " + peer_ + " timed out")); return;
    case Stage::handshaking:
      fail(make_error(Errc::timeout, "the TLS handshake with " + peer_ + " timed out (within " +
                                         seconds_text(options_.handshake_timeout) + ")"));
      return;
    default: return;
  }
}

// ---- events ----------------------------------------------------------------

void Connection::on_ready(std::uint32_t ready) {
  const Token t = token_;
  switch (stage_) {
    case Stage::connecting: on_connect_ready(); return;
    case Stage::handshaking: do_handshake(); return;
    case Stage::open: break;
    default: return;
  }
  const bool writable = (ready & (Loop::kWritable | Loop::kHangup)) != 0;
  const bool readable = (ready & (Loop::kReadable | Loop::kHangup)) != 0;
  if (writable && read_wants_write_) {
    read_wants_write_ = false;
    do_read();
    if (!*t || stage_ != Stage::open) return;
  }
  if (writable && write_blocked_) {
    write_blocked_ = false;
    flush();
    if (!*t || stage_ != Stage::open) return;
  }
  if (readable && write_wants_read_) {
    write_wants_read_ = false;
    flush();
    if (!*t || stage_ != Stage::open) return;
  }
  if (readable && !paused_ && !read_eof_) {
    do_read();
    if (!*t || stage_ != Stage::open) return;
  }
  if ((ready & Loop::kHangup) && reg_fd_ >= 0) {
    // Hung up or failed while we wait for neither direction: epoll would
    // report it on every iteration. Take the error now, or park the fd
    // until the handler reads or writes again.
    const bool waiting_read = (!paused_ && !read_eof_) || write_wants_read_;
    const bool waiting_write = write_blocked_ || read_wants_write_;
    if (!waiting_read && !waiting_write) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == ECONNRESET) {
        fail(make_error(Errc::network, std::string(kConnectionReset)));
        return;
      }
      if (err != 0) {
        fail(make_error(Errc::network, "connection to " + peer_ + " failed: " + detail::errno_text(err)));
        return;
      }
      unregister_fd();
      return;
    }
  }
  update_interest();
}

void Connection::update_interest() {
  if (stage_ == Stage::closed || stage_ == Stage::resolving || fd() < 0) return;
  std::uint32_t want = 0;
  switch (stage_) {
    case Stage::connecting: want = Loop::kWritable; break;
    case Stage::handshaking: want = handshake_wants_; break;
    case Stage::open:
      if ((!paused_ && !read_eof_) || write_wants_read_) want |= Loop::kReadable;
      if (write_blocked_ || read_wants_write_) want |= Loop::kWritable;
      break;
    default: break;
  }
  if (reg_fd_ < 0 && want == 0) return;  // parked, and nothing to wait for yet
  register_fd(want);
}

// ---- reading ---------------------------------------------------------------

void Connection::do_read() {
  const Token t = token_;
  std::size_t budget = options_.max_read_per_wakeup;
  while (stage_ == Stage::open && !paused_ && !read_eof_ && !read_wants_write_) {
    if (budget == 0) {
      // Level-triggered epoll reports the socket again; bytes TLS has
      // already decrypted need a nudge.
      if (stream_->has_buffered_input()) schedule_read();
      break;
    }
    const std::span<std::uint8_t> buf = handler_->read_buffer(*this);
    if (!*t || stage_ != Stage::open) return;
    if (buf.empty()) {
      paused_ = true;
      break;
    }
    IoStep step = stream_->read(buf);
    switch (step.kind) {
      case IoStep::Kind::done: {
        bytes_read_ += step.bytes;
        last_active_ = Clock::now();
        budget -= std::min(budget, step.bytes);
        handler_->on_read(*this, ByteSpan(buf.data(), step.bytes));
        if (!*t || stage_ != Stage::open) return;
        continue;
      }
      case IoStep::Kind::want_read: break;
      case IoStep::Kind::want_write: read_wants_write_ = true; break;
      case IoStep::Kind::eof:
        read_eof_ = true;
        update_interest();
        handler_->on_read_eof(*this);
        if (!*t || stage_ != Stage::open) return;
        if (write_dead_) {
          fail(write_error_);
          return;
        }
        if (finishing_ && write_shut_) {
          close_quietly();
          handler_->on_closed(*this, ok_status());
          return;
        }
        break;
      case IoStep::Kind::error: fail(std::move(step.error)); return;
    }
    break;
  }
  update_interest();
}

void Connection::pause_reading() {
  if (paused_) return;
  paused_ = true;
  update_interest();
}

void Connection::resume_reading() {
  if (!paused_) return;
  paused_ = false;
  if (stage_ != Stage::open) return;
  update_interest();
  if (stream_->has_buffered_input()) schedule_read();
}

void Connection::schedule_read() {
  if (read_scheduled_) return;
  read_scheduled_ = true;
  loop_.defer([this, t = token_] {
    if (!*t) return;
    read_scheduled_ = false;
    if (stage_ == Stage::open && !paused_ && !read_eof_) do_read();
  });
}

// ---- writing ---------------------------------------------------------------

bool Connection::send(Bytes data) {
  if (stage_ == Stage::closed || finishing_ || close_after_flush_ || write_dead_) return false;
  if (data.empty()) return true;
  queued_ += data.size();
  out_.push_back(std::move(data));
  if (output_full()) was_full_ = true;
  if (stage_ == Stage::open) schedule_flush();
  return true;
}

void Connection::schedule_flush() {
  if (flush_scheduled_ || write_blocked_ || write_wants_read_) return;
  flush_scheduled_ = true;
  loop_.defer([this, t = token_] {
    if (!*t) return;
    flush_scheduled_ = false;
    if (stage_ == Stage::open && !write_blocked_ && !write_wants_read_) flush();
  });
}

void Connection::flush() {
  if (write_dead_) return;
  std::array<ByteSpan, kMaxGather> spans;
  while (out_head_ < out_.size()) {
    std::size_t n = 0;
    for (std::size_t i = out_head_; i < out_.size() && n < kMaxGather; ++i)
      spans[n++] = i == out_head_ ? out_[i].span().subspan(out_offset_) : out_[i].span();
    IoStep step = stream_->writev(std::span<const ByteSpan>(spans.data(), n));
    if (step.kind == IoStep::Kind::done) {
      std::size_t left = step.bytes;
      bytes_written_ += left;
      queued_ -= left;
      if (left > 0) last_active_ = Clock::now();
      while (left > 0) {
        const std::size_t rest = out_[out_head_].size() - out_offset_;
        if (left < rest) {
          out_offset_ += left;
          break;
        }
        left -= rest;
        out_[out_head_++] = Bytes();  // give the buffer back now
        out_offset_ = 0;
      }
      if (step.bytes == 0) break;  // nothing taken: try again when writable
      continue;
    }
    if (step.kind == IoStep::Kind::want_write) {
      write_blocked_ = true;
      break;
    }
    if (step.kind == IoStep::Kind::want_read) {
      write_wants_read_ = true;
      break;
    }
    write_failed(step.kind == IoStep::Kind::eof
                     ? make_error(Errc::network, "the peer closed the connection while we wrote")
                     : std::move(step.error));
    return;
  }
  if (out_head_ == out_.size()) {
    out_.clear();
    if (out_.capacity() > 256) out_.shrink_to_fit();
    out_head_ = 0;
  } else if (out_head_ >= 64 && out_head_ * 2 >= out_.size()) {
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(out_head_));
    out_head_ = 0;
  }
  after_write();
}

void Connection::after_write() {
  const Token t = token_;
  if (was_full_ && queued_ <= options_.max_output_bytes / 2) {
    was_full_ = false;
    handler_->on_drained(*this);
    if (!*t || stage_ != Stage::open) return;
  }
  if (queued_ == 0 && (finishing_ || close_after_flush_) && !write_shut_) {
    stream_->shutdown();
    write_shut_ = true;
    if (close_after_flush_ || read_eof_) {
      close_quietly();
      handler_->on_closed(*this, ok_status());
      return;
    }
  }
  update_interest();
}

void Connection::write_failed(Error e) {
  write_dead_ = true;
  write_blocked_ = false;
  write_wants_read_ = false;
  out_.clear();
  out_head_ = 0;
  out_offset_ = 0;
  queued_ = 0;
  const Token t = token_;
  const bool keep_reading = handler_->on_write_error(*this, e);
  if (!*t || stage_ != Stage::open) return;
  if (!keep_reading || read_eof_ || close_after_flush_) {
    fail(std::move(e));
    return;
  }
  write_error_ = std::move(e);
  update_interest();
}

// ---- ending ----------------------------------------------------------------

void Connection::finish() {
  if (stage_ == Stage::closed || finishing_) return;
  finishing_ = true;
  if (stage_ != Stage::open) return;  // done once open
  if (write_dead_) {
    if (read_eof_) fail(write_error_);
    return;
  }
  // Not from inside the caller: the flush may end the connection.
  schedule_flush();
}

void Connection::close_when_flushed() {
  if (stage_ == Stage::closed || close_after_flush_) return;
  close_after_flush_ = true;
  paused_ = true;  // nothing more is read
  if (stage_ != Stage::open) return;
  if (write_dead_) {
    loop_.defer([this, t = token_] {
      if (*t && stage_ != Stage::closed) fail(write_error_);
    });
    return;
  }
  update_interest();
  if (!write_blocked_ && !write_wants_read_) schedule_flush();
}

void Connection::close() {
  if (stage_ == Stage::closed) return;
  if (stage_ == Stage::open && !write_shut_ && !write_dead_) stream_->shutdown();
  close_quietly();
}

void Connection::close_quietly() {
  unregister_fd();
  loop_.cancel_timer(handshake_timer_);
  loop_.cancel_timer(idle_timer_);
  resolve_.cancel();
  stream_.reset();
  connecting_.reset();
  out_.clear();
  out_.shrink_to_fit();
  out_head_ = 0;
  out_offset_ = 0;
  queued_ = 0;
  stage_ = Stage::closed;
}

void Connection::fail(Error e) {
  if (stage_ == Stage::closed) return;
  close_quietly();
  handler_->on_closed(*this, std::move(e));
}

// ---- idle timeout ----------------------------------------------------------

void Connection::arm_idle_timer(Clock::time_point at) {
  idle_timer_ = loop_.add_timer(at, [this, t = token_] {
    if (*t) on_idle_timer();
  });
}

void Connection::on_idle_timer() {
  idle_timer_ = Timer{};
  if (stage_ != Stage::open) return;
  const auto due = last_active_ + options_.idle_timeout;
  if (Clock::now() < due) {
    arm_idle_timer(due);
    return;
  }
  // A healthy connection that went quiet: end it politely.
  if (!write_shut_ && !write_dead_) stream_->shutdown();
  fail(make_error(Errc::timeout, "no bytes from or to " + peer_ + " for " + seconds_text(options_.idle_timeout)));
}

}  // namespace daskcaps::net
