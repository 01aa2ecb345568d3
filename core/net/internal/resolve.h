// Name resolution and socket addresses, for the net layer's sockets,
// connections, TLS and survey (an Address: daskcaps/net/address.h).
//
// A numeric host (IPv4 or IPv6 literal) never touches DNS. A host name
// goes to getaddrinfo (AF_UNSPEC, SOCK_STREAM, AI_ADDRCONFIG), which can
// neither be cancelled nor bounded, so it always runs on a helper thread:
//   - resolve() waits for it until the caller's deadline, for the blocking
//     callers (core/net/internal/socket.h connect, listen_tcp);
//   - resolve_async() never blocks: a small pool of resolver threads (at
//     most kResolverThreads, started on demand, gone when idle) runs the
//     lookups and posts each answer to the event loop that asked
//     (daskcaps/net/loop.h), so no lookup ever runs on a loop. A lookup that
//     hangs holds one resolver thread, never the loop.
//
// Errors: Errc::network "cannot resolve host \"x\": <reason>" (also for an
// answer with no addresses), Errc::timeout when resolve()'s deadline passes
// first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/socket.h>

#include "daskcaps/base/result.h"
#include "daskcaps/net/address.h"
#include "core/net/internal/clock.h"

namespace daskcaps::net {

class Loop;

/// "127.0.0.1" / "::1" for a socket address ("" for another family).
std::string ip_string(const sockaddr_storage& addr);
/// "127.0.0.1:8786" / "[::1]:8786" for a socket address.
std::string sockaddr_text(const sockaddr_storage& addr);
/// The port of an AF_INET/AF_INET6 socket address (0 otherwise), and the
/// same address with another port.
std::uint16_t port_of(const sockaddr_storage& addr);
void set_port(sockaddr_storage& addr, std::uint16_t port);
/// The length to pass to connect()/bind() for `addr`.
socklen_t sockaddr_length(const sockaddr_storage& addr);

/// The socket address of a numeric host ("10.0.0.5", "::1"), or nullopt for
/// a name that needs DNS.
std::optional<sockaddr_storage> numeric_address(const std::string& host, std::uint16_t port);

/// Resolves host:port (numeric hosts without DNS), waiting at most until
/// `deadline`. Errors: Errc::network, Errc::timeout.
Result<std::vector<sockaddr_storage>> resolve(const Address& address, Deadline deadline);

/// Resolver threads at most, for every loop of the process together.
inline constexpr std::size_t kResolverThreads = 4;

using ResolveCallback = std::function<void(Result<std::vector<sockaddr_storage>>)>;

/// A lookup in flight. Destroying or cancelling it means the callback is
/// never called (the lookup itself may go on in its thread and is dropped).
class ResolveRequest {
 public:
  ResolveRequest() = default;
  ResolveRequest(ResolveRequest&&) noexcept = default;
  ResolveRequest& operator=(ResolveRequest&& o) noexcept;
  ResolveRequest(const ResolveRequest&) = delete;
  ResolveRequest& operator=(const ResolveRequest&) = delete;
  ~ResolveRequest() { cancel(); }
  void cancel();
  /// True until the callback has run or the request was cancelled.
  bool pending() const;

  struct State;

 private:
  friend ResolveRequest resolve_async(Loop&, const Address&, ResolveCallback);
  std::shared_ptr<State> state_;
};

/// Resolves host:port without blocking the loop. `done` runs on `loop`'s
/// thread, later, never inside this call, with the addresses or an
/// Errc::network error; for a numeric host it runs on the loop's next
/// iteration without a thread. There is no deadline here: the caller keeps
/// its own timer and cancels the request when it fires. Must be called on
/// the loop's thread.
[[nodiscard]] ResolveRequest resolve_async(Loop& loop, const Address& address, ResolveCallback done);

}  // namespace daskcaps::net
