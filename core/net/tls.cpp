#include "daskcaps/net/tls.h"

#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/net/internal/resolve.h"
#include "core/net/detail/sys.h"
#include "core/net/internal/socket.h"

namespace daskcaps::net {

namespace {

std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    std::string text;
    if (reason) {
      text = reason;
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "error 0x%lx", e);
      text = buf;
    }
    if (out.find(text) == std::string::npos) out += (out.empty() ? "" : "; ") + text;
  }
  return out;
}

// ---- a BIO over a non-blocking fd, without SIGPIPE -------------------------

int fd_of(BIO* b) { return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b))); }

int bio_write(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  for (;;) {
    const ssize_t n = ::send(fd_of(b), data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(b);
    return -1;
  }
}

int bio_read(BIO* b, char* out, int len) {
  BIO_clear_retry_flags(b);
  for (;;) {
    const ssize_t n = ::recv(fd_of(b), out, static_cast<std::size_t>(len), 0);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(b);
    return -1;
  }
}

int bio_puts(BIO* b, const char* s) { return bio_write(b, s, static_cast<int>(std::strlen(s))); }

long bio_ctrl(BIO*, int cmd, long, void*) {
  // Only flush matters to the TLS record layer; everything else (ktls,
  // push/pop) is "not supported".
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

const BIO_METHOD* fd_bio_method() {
  // Made once, kept for the life of the process.
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dask-caps socket");
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_puts(m, bio_puts);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    return m;
  }();
  return method;
}

// ---- the stream ----------------------------------------------------------

enum class Role : std::uint8_t { client, server };

class TlsStream final : public Stream {
 public:
  TlsStream(Socket s, SSL* ssl, Role role, bool ca_given, bool cert_given)
      : socket_(std::move(s)), ssl_(ssl), role_(role), ca_given_(ca_given), cert_given_(cert_given) {}
  ~TlsStream() override { SSL_free(ssl_); }
  int fd() const override { return socket_.fd(); }

  IoStep handshake() override {
    ERR_clear_error();
    const int rc = SSL_do_handshake(ssl_);
    if (rc == 1) return IoStep::done();
    return failure(rc, kHandshake);
  }
  IoStep read(std::span<std::uint8_t> out) override {
    ERR_clear_error();
    std::size_t n = 0;
    const int rc = SSL_read_ex(ssl_, out.data(), out.size(), &n);
    if (rc == 1) return IoStep::done(n);
    return failure(rc, "TLS read");
  }
  IoStep write(ByteSpan data) override {
    ERR_clear_error();
    std::size_t n = 0;
    const int rc = SSL_write_ex(ssl_, data.data(), data.size(), &n);
    if (rc == 1) return IoStep::done(n);
    return failure(rc, "TLS write");
  }
  IoStep writev(std::span<const ByteSpan> data) override {
    // One record per small buffer would cost a header, a MAC and a syscall
    // each: pack small buffers into one record. A retry after want_write
    // packs the same leading bytes again (the caller's queue only grows at
    // its end), which is what OpenSSL requires of a retried write.
    std::size_t first = 0;
    while (first < data.size() && data[first].empty()) ++first;
    if (first == data.size()) return IoStep::done(0);
    if (data[first].size() >= kRecord || first + 1 == data.size()) return write(data[first]);
    thread_local std::array<std::uint8_t, kRecord> scratch;
    std::size_t used = 0;
    for (std::size_t i = first; i < data.size() && used < kRecord; ++i) {
      const std::size_t n = std::min(data[i].size(), kRecord - used);
      std::memcpy(scratch.data() + used, data[i].data(), n);
      used += n;
    }
    return write(ByteSpan(scratch.data(), used));
  }
  bool has_buffered_input() const override { return SSL_has_pending(ssl_) == 1; }
  void shutdown() override {
    ERR_clear_error();
    if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
    ERR_clear_error();
    ::shutdown(socket_.fd(), SHUT_WR);
  }
  std::string peer_ip() const override { return detail::endpoint_ip(socket_.fd(), true); }
  std::string local_ip() const override { return detail::endpoint_ip(socket_.fd(), false); }

 private:
  static constexpr std::size_t kRecord = 16 * 1024;
  static constexpr std::string_view kHandshake = "TLS handshake";

  std::string verify_hint() const {
    if (role_ == Role::server) return " (is --listen-ca-file the CA that signed the client's certificate?)";
    return ca_given_ ? " (is --tls-ca-file the CA that signed the peer's certificate?)"
                     : " (give the cluster's CA with --tls-ca-file)";
  }

  IoStep failure(int rc, std::string_view stage) {
    const int saved_errno = errno;
    const int err = SSL_get_error(ssl_, rc);
    switch (err) {
      case SSL_ERROR_WANT_READ: return IoStep::want_read();
      case SSL_ERROR_WANT_WRITE: return IoStep::want_write();
      case SSL_ERROR_ZERO_RETURN:
        if (stage == kHandshake)
          return IoStep::failed(make_error(Errc::tls, "the peer closed the connection during the TLS handshake"));
        return IoStep::eof();
      default: break;
    }
    const long verify = SSL_get_verify_result(ssl_);
    std::string reasons = openssl_errors();
    if (verify != X509_V_OK && stage == kHandshake) {
      std::string what = std::string(role_ == Role::server ? "client " : "") +
                         "certificate verification failed: " + X509_verify_cert_error_string(verify);
      return IoStep::failed(make_error(Errc::tls, what + verify_hint()));
    }
    if (err == SSL_ERROR_SYSCALL && reasons.empty()) {
      if (rc == 0 || saved_errno == 0) {
        if (stage == kHandshake)
          return IoStep::failed(make_error(
              Errc::tls, role_ == Role::server
                             ? "the peer closed the connection during the TLS handshake"
                             : "the peer closed the connection during the TLS handshake (is it a tls:// endpoint?)"));
        return IoStep::eof();
      }
      if (saved_errno == ECONNRESET) {
        if (stage == kHandshake)
          return IoStep::failed(make_error(Errc::tls, "the peer reset the connection during the TLS handshake"));
        return IoStep::failed(make_error(Errc::network, std::string(kConnectionReset)));
      }
      if (saved_errno == EPIPE)
        return IoStep::failed(make_error(Errc::network, "the peer closed the connection while we wrote"));
      return IoStep::failed(
          make_error(Errc::network, std::string(stage) + " failed: " + detail::errno_text(saved_errno)));
    }
    if (reasons.find("unexpected eof") != std::string::npos && stage != kHandshake) return IoStep::eof();
    std::string what = std::string(stage) + " failed: " + (reasons.empty() ? "unknown error" : reasons);
    if (reasons.find("wrong version number") != std::string::npos ||
        reasons.find("packet length too long") != std::string::npos ||
        reasons.find("record layer failure") != std::string::npos ||
        reasons.find("http request") != std::string::npos)
      what += role_ == Role::server ? " (the client does not speak TLS: is it using tcp://?)"
                                    : " (is the peer a plain tcp:// endpoint?)";
    else if (role_ == Role::server && reasons.find("peer did not return a certificate") != std::string::npos)
      what += " (this listener requires a client certificate: it has --listen-ca-file)";
    else if (role_ == Role::client && (reasons.find("certificate required") != std::string::npos ||
                                       (reasons.find("handshake failure") != std::string::npos && !cert_given_)))
      what += cert_given_ ? " (the peer did not accept our certificate)"
                          : " (the peer wants a client certificate: give --tls-cert and --tls-key)";
    else if (role_ == Role::client && (reasons.find("unknown ca") != std::string::npos ||
                                       reasons.find("bad certificate") != std::string::npos))
      what += " (the peer did not accept our certificate)";
    return IoStep::failed(make_error(Errc::tls, what));
  }

  Socket socket_;
  SSL* ssl_;
  Role role_;
  bool ca_given_;
  bool cert_given_;
};

/// An SSL over `socket` through the fd BIO; nullptr with the error.
Result<SSL*> new_ssl(SSL_CTX* ctx, const Socket& socket) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return make_error(Errc::tls, "cannot create a TLS session: " + openssl_errors());
  BIO* bio = BIO_new(fd_bio_method());
  if (!bio) {
    SSL_free(ssl);
    return make_error(Errc::tls, "cannot attach TLS to the socket: " + openssl_errors());
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(socket.fd())));
  SSL_set_bio(ssl, bio, bio);  // the SSL owns the BIO (one reference for both sides)
  return ssl;
}

/// Settings both sides share.
void common_settings(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
}

Status load_cert_and_key(SSL_CTX* ctx, const std::string& cert, const std::string& key_file) {
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1)
    return make_error(Errc::tls, "cannot load the certificate \"" + cert + "\": " + openssl_errors());
  const std::string& key = key_file.empty() ? cert : key_file;
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
    return make_error(Errc::tls, "cannot load the private key \"" + key + "\": " + openssl_errors());
  if (SSL_CTX_check_private_key(ctx) != 1)
    return make_error(Errc::tls, "the key \"" + key + "\" does not match the certificate \"" + cert + "\"");
  return ok_status();
}

}  // namespace

// ---- client --------------------------------------------------------------

struct TlsClientContext::Impl {
  SSL_CTX* ctx = nullptr;
  bool ca_given = false;
  bool cert_given = false;
  ~Impl() {
    if (ctx) SSL_CTX_free(ctx);
  }
};

TlsClientContext::~TlsClientContext() = default;

Result<std::shared_ptr<TlsClientContext>> TlsClientContext::create(const TlsOptions& options) {
  std::shared_ptr<TlsClientContext> out(new TlsClientContext());
  out->impl_ = std::make_unique<Impl>();
  Impl& impl = *out->impl_;
  ERR_clear_error();
  impl.ctx = SSL_CTX_new(TLS_client_method());
  if (!impl.ctx) return make_error(Errc::tls, "cannot create a TLS context: " + openssl_errors());
  common_settings(impl.ctx);
  SSL_CTX_set_verify(impl.ctx, SSL_VERIFY_PEER, nullptr);
  if (!options.ca_file.empty()) {
    impl.ca_given = true;
    if (SSL_CTX_load_verify_locations(impl.ctx, options.ca_file.c_str(), nullptr) != 1)
      return make_error(Errc::tls, "cannot load the CA file \"" + options.ca_file + "\": " + openssl_errors());
  } else if (SSL_CTX_set_default_verify_paths(impl.ctx) != 1) {
    return make_error(Errc::tls, "cannot load the system CA store: " + openssl_errors());
  }
  if (!options.cert_file.empty()) {
    impl.cert_given = true;
    if (auto st = load_cert_and_key(impl.ctx, options.cert_file, options.key_file); !st) return st.error();
  } else if (!options.key_file.empty()) {
    return make_error(Errc::usage, "--tls-key needs --tls-cert");
  }
  return out;
}

Result<std::unique_ptr<Stream>> TlsClientContext::wrap(Socket socket, const std::string& server_name) const {
  auto ssl = new_ssl(impl_->ctx, socket);
  if (!ssl) return std::move(ssl).error();
  SSL_set_connect_state(*ssl);
  if (!server_name.empty() && !numeric_address(server_name, 0)) SSL_set_tlsext_host_name(*ssl, server_name.c_str());
  return std::unique_ptr<Stream>(
      std::make_unique<TlsStream>(std::move(socket), *ssl, Role::client, impl_->ca_given, impl_->cert_given));
}

// ---- server --------------------------------------------------------------

struct TlsServerContext::Impl {
  SSL_CTX* ctx = nullptr;
  bool verify_clients = false;
  ~Impl() {
    if (ctx) SSL_CTX_free(ctx);
  }
};

TlsServerContext::~TlsServerContext() = default;

bool TlsServerContext::verifies_clients() const { return impl_->verify_clients; }

Result<std::shared_ptr<TlsServerContext>> TlsServerContext::create(const TlsServerOptions& options) {
  if (options.cert_file.empty())
    return make_error(Errc::usage, "a TLS listener needs a certificate (--listen-cert) and its key (--listen-key)");
  std::shared_ptr<TlsServerContext> out(new TlsServerContext());
  out->impl_ = std::make_unique<Impl>();
  Impl& impl = *out->impl_;
  ERR_clear_error();
  impl.ctx = SSL_CTX_new(TLS_server_method());
  if (!impl.ctx) return make_error(Errc::tls, "cannot create a TLS context: " + openssl_errors());
  common_settings(impl.ctx);
  SSL_CTX_set_session_cache_mode(impl.ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(impl.ctx, 0);
  if (auto st = load_cert_and_key(impl.ctx, options.cert_file, options.key_file); !st) return st.error();
  if (!options.ca_file.empty()) {
    impl.verify_clients = true;
    if (SSL_CTX_load_verify_locations(impl.ctx, options.ca_file.c_str(), nullptr) != 1)
      return make_error(Errc::tls, "cannot load the CA file \"" + options.ca_file + "\": " + openssl_errors());
    // Tell clients which CA we accept (their certificate request lists it).
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(impl.ctx, names);
    }
    ERR_clear_error();
    SSL_CTX_set_verify(impl.ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return out;
}

Result<std::unique_ptr<Stream>> TlsServerContext::wrap(Socket socket) const {
  auto ssl = new_ssl(impl_->ctx, socket);
  if (!ssl) return std::move(ssl).error();
  SSL_set_accept_state(*ssl);
  return std::unique_ptr<Stream>(
      std::make_unique<TlsStream>(std::move(socket), *ssl, Role::server, impl_->verify_clients, true));
}

}  // namespace daskcaps::net
