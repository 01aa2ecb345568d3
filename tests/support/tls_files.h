// Test helper: a throw-away PKI written as PEM files into a temporary
// folder, made with OpenSSL's API (EC P-256 keys: fast to make and to use):
//   ca.pem / ca.key        a self-signed CA
//   server.pem/server.key  signed by the CA (SAN IP:127.0.0.1, DNS:localhost)
//   client.pem/client.key  signed by the CA
//   other-ca.pem           a second CA that signed nothing here
//   rogue.pem/rogue.key    a client certificate signed by other-ca
// The folder is removed when the TlsFiles object dies.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace testsupport {

class TlsFiles {
 public:
  TlsFiles() {
    char tmpl[] = "/tmp/daskcaps-tls-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    EVP_PKEY* ca_key = make_key();
    X509* ca = make_cert(ca_key, "dask-caps test CA", nullptr, ca_key, true);
    EVP_PKEY* other_key = make_key();
    X509* other = make_cert(other_key, "dask-caps other CA", nullptr, other_key, true);
    write_cert(ca, "ca.pem");
    write_key(ca_key, "ca.key");
    write_cert(other, "other-ca.pem");
    for (const char* name : {"server", "client", "rogue"}) {
      EVP_PKEY* key = make_key();
      const bool rogue = std::string(name) == "rogue";
      X509* cert = make_cert(key, std::string("dask-caps test ") + name, rogue ? other : ca,
                             rogue ? other_key : ca_key, false);
      write_cert(cert, std::string(name) + ".pem");
      write_key(key, std::string(name) + ".key");
      X509_free(cert);
      EVP_PKEY_free(key);
    }
    X509_free(other);
    EVP_PKEY_free(other_key);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
  }
  ~TlsFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TlsFiles(const TlsFiles&) = delete;
  TlsFiles& operator=(const TlsFiles&) = delete;

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  static EVP_PKEY* make_key() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    if (!key) throw std::runtime_error("EC key generation failed");
    return key;
  }

  static X509* make_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool is_ca) {
    X509* x = X509_new();
    X509_set_version(x, 2);
    static long serial = 1;
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 2 * 24 * 3600);
    X509_set_pubkey(x, key);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                               0);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : x, x, nullptr, nullptr, 0);
    add_ext(x, &ctx, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (is_ca) {
      add_ext(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
      add_ext(x, &ctx, NID_subject_key_identifier, "hash");
    } else {
      add_ext(x, &ctx, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    }
    if (X509_sign(x, issuer_key, EVP_sha256()) == 0) throw std::runtime_error("X509_sign failed");
    return x;
  }

  static void add_ext(X509* x, X509V3_CTX* ctx, int nid, const char* value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
    if (!ext) throw std::runtime_error("bad extension");
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }

  void write_cert(X509* x, const std::string& name) const {
    FILE* f = std::fopen(path(name).c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + name);
    PEM_write_X509(f, x);
    std::fclose(f);
  }

  void write_key(EVP_PKEY* k, const std::string& name) const {
    FILE* f = std::fopen(path(name).c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + name);
    PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(f);
  }

  std::string dir_;
};

}  // namespace testsupport
