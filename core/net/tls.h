// TLS for Dask comms (docs/protocol.md §1.6): OpenSSL over the non-blocking sockets of
// core/net/internal/socket.h, client and server side.
//
// Inputs are those of Dask's TLS settings: a CA file, a certificate and its
// key (PEM). TLS 1.2 is the minimum, as Dask's distributed.comm.tls.min-version.
//
// Client (`check`, the survey, a bridge's upstream): the peer's certificate
// chain is always verified, against the CA file or, without one, the
// system store. Like Dask (ssl.create_default_context with check_hostname =
// False) the host name is NOT matched against the certificate: Dask
// clusters commonly use one certificate for every worker, whose addresses
// are IPs chosen at start. SNI carries the host name when the address has
// one. A client certificate is sent when given (Dask's schedulers and
// workers require one).
//
// Server (`serve --listen tls://`, a bridge's listener): a certificate
// chain and its key are required. With a CA file, every client must
// present a certificate that the CA signed (SSL_VERIFY_PEER |
// SSL_VERIFY_FAIL_IF_NO_PEER_CERT), as a Dask scheduler with
// --tls-ca-file requires; without one, clients are not asked for a
// certificate. No session cache and no session tickets: Dask does not
// resume sessions, and a cache would hold memory per closed connection.
//
// I/O goes through a small custom BIO that calls recv() and
// send(MSG_NOSIGNAL) on the fd, so a write to a closed peer is an error
// value, never a SIGPIPE, without touching the signal mask. OpenSSL's
// read and write buffers are released while a connection is idle
// (SSL_MODE_RELEASE_BUFFERS): an idle TLS connection keeps its session
// state, the peer's certificate chain among it (core/net/internal/connection.h
// says where its memory is measured).
//
// Errors: Errc::tls for files that cannot be loaded, a key that does not
// match its certificate, and every handshake or verification failure; the
// message ends with a hint in parentheses naming the flag to check
// (--tls-ca-file/--tls-cert on the client side, --listen-ca-file on the
// server side) or saying that the peer speaks plain TCP. Errc::usage for a
// key without a certificate. A reset or a close in the middle of the
// handshake is Errc::tls; after it, reads answer eof (close_notify or a
// bare FIN) or the Errc::network kConnectionReset error.
#pragma once

#include <memory>
#include <string>

#include "daskcaps/base/result.h"

namespace daskcaps::net {

// A connected socket and the byte stream over it (core/net/internal/socket.h).
class Socket;
class Stream;

struct TlsOptions {
  std::string ca_file;    // --tls-ca-file; empty: the system's CA store
  std::string cert_file;  // --tls-cert (PEM, may hold the key too)
  std::string key_file;   // --tls-key; empty: the key is in cert_file
};

/// An OpenSSL client context, shared by every connection of a check.
class TlsClientContext {
 public:
  /// Loads the CA, certificate and key. Errc::tls when a file cannot be
  /// read or the key does not match the certificate; Errc::usage for a key
  /// without a certificate.
  static Result<std::shared_ptr<TlsClientContext>> create(const TlsOptions& options);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;
  /// A TLS stream over a connected socket, handshake not yet started (call
  /// Stream::handshake until done); `server_name` goes into SNI when it is
  /// a host name.
  Result<std::unique_ptr<Stream>> wrap(Socket socket, const std::string& server_name) const;

 private:
  TlsClientContext() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TlsServerOptions {
  std::string cert_file;  // --listen-cert (PEM chain, may hold the key too); required
  std::string key_file;   // --listen-key; empty: the key is in cert_file
  std::string ca_file;    // --listen-ca-file; given: clients must present a certificate it signed
};

/// An OpenSSL server context, shared by every accepted connection.
class TlsServerContext {
 public:
  /// Loads the certificate, key and CA. Errc::usage without a certificate;
  /// Errc::tls when a file cannot be read or the key does not match.
  static Result<std::shared_ptr<TlsServerContext>> create(const TlsServerOptions& options);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;
  /// A TLS stream over an accepted socket, handshake not yet started.
  Result<std::unique_ptr<Stream>> wrap(Socket socket) const;
  bool verifies_clients() const;

 private:
  TlsServerContext() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace daskcaps::net
