#pragma once

// Certificates made in the test that uses them (OpenSSL 3): an authority, and keys with
// certificates it signs for a server (localhost, 127.0.0.1) and a client. Nothing is read from or
// written to disk here; the texts are PEM.

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace af::testing {

struct pem_identity {
  std::string key;   ///< PKCS#8 private key
  std::string cert;  ///< its certificate
};

struct test_certificates {
  pem_identity authority, server, client;
};

namespace detail {

struct key_deleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct cert_deleter {
  void operator()(X509* c) const { X509_free(c); }
};
using key_ptr = std::unique_ptr<EVP_PKEY, key_deleter>;
using cert_ptr = std::unique_ptr<X509, cert_deleter>;

inline void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string{"test certificate: "} + what + " failed");
}

inline std::string to_pem(EVP_PKEY* key, X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  check(bio != nullptr, "BIO_new");
  bool ok = key ? PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1 : PEM_write_bio_X509(bio, cert) == 1;
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  check(ok, "PEM_write");
  return out;
}

inline void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  check(ext != nullptr, "X509V3_EXT_conf_nid");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A P-256 key and a certificate for `common_name`, signed by `issuer` (itself when null).
inline std::pair<key_ptr, cert_ptr> make_identity(const char* common_name, long serial, EVP_PKEY* issuer_key, X509* issuer,
                                                  bool authority, const char* alt_names) {
  key_ptr key{EVP_EC_gen("P-256")};
  check(key != nullptr, "EVP_EC_gen");
  cert_ptr cert{X509_new()};
  check(cert != nullptr, "X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0);
  X509* signer = issuer ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  add_extension(cert.get(), signer, NID_basic_constraints, authority ? "critical,CA:TRUE" : "CA:FALSE");
  if (authority) add_extension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  if (alt_names) add_extension(cert.get(), signer, NID_subject_alt_name, alt_names);
  check(X509_sign(cert.get(), issuer_key ? issuer_key : key.get(), EVP_sha256()) > 0, "X509_sign");
  return {std::move(key), std::move(cert)};
}

}  // namespace detail

/// A fresh authority and the server and client identities it signs.
inline test_certificates make_test_certificates() {
  using namespace detail;
  auto [ca_key, ca_cert] = make_identity("actorflow test authority", 1, nullptr, nullptr, true, nullptr);
  auto [server_key, server_cert] = make_identity("localhost", 2, ca_key.get(), ca_cert.get(), false, "DNS:localhost,IP:127.0.0.1");
  auto [client_key, client_cert] = make_identity("actorflow test client", 3, ca_key.get(), ca_cert.get(), false, nullptr);
  return {{to_pem(ca_key.get(), nullptr), to_pem(nullptr, ca_cert.get())},
          {to_pem(server_key.get(), nullptr), to_pem(nullptr, server_cert.get())},
          {to_pem(client_key.get(), nullptr), to_pem(nullptr, client_cert.get())}};
}

}  // namespace af::testing
