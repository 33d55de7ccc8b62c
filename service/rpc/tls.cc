#include "service/rpc/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace cmestream::service {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// Never prompts on the terminal for a passphrase: an encrypted key simply does not load.
int NoPassphrase(char*, int, int, void*) { return 0; }

Bio MemBio(const std::string& pem) { return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

// The first certificate of a PEM text, or null.
Cert FirstCertificate(const std::string& pem) {
  Bio bio = MemBio(pem);
  return Cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr) : nullptr);
}

// The first private key of a PEM text (not encrypted), or null.
Key FirstPrivateKey(const std::string& pem) {
  Bio bio = MemBio(pem);
  return Key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr) : nullptr);
}

std::string Subject(X509* cert) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
  return buf;
}

// Clears OpenSSL's thread-local error queue on every exit, so a refused parse here never shows
// up as a stale error in gRPC's own use of OpenSSL on this thread.
struct ClearOpenSslErrors {
  ~ClearOpenSslErrors() { ERR_clear_error(); }
};

}  // namespace

absl::Status CheckTlsFiles(const SecurityOptions& o, const std::string& cert_pem, const std::string& key_pem,
                           const std::string& client_ca_pem) {
  ClearOpenSslErrors clear;
  Cert cert = FirstCertificate(cert_pem);
  Key key = FirstPrivateKey(key_pem);
  if (!cert) {
    const bool swapped = FirstPrivateKey(cert_pem) != nullptr && FirstCertificate(key_pem) != nullptr;
    return absl::InvalidArgumentError(absl::StrCat("flag --tls-cert: '", o.tls_cert,
                                                   "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                                                   swapped ? "; it holds a private key: --tls-cert and --tls-key "
                                                             "are swapped?"
                                                           : ""));
  }
  if (!key) {
    const bool encrypted = absl::StrContains(key_pem, "ENCRYPTED");
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --tls-key: '", o.tls_key, "' holds no private key that can be read",
        encrypted ? ": it is encrypted with a passphrase, and the daemon needs it unencrypted (e.g. `openssl pkey "
                    "-in KEY -out KEY.plain`, then chmod 600)"
                  : " (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("flags --tls-cert and --tls-key do not match: the private key in '",
                                                   o.tls_key, "' is not the key of the certificate in '", o.tls_cert,
                                                   "' (subject ", Subject(cert.get()), ")"));
  }
  if (!o.tls_client_ca.empty() && !FirstCertificate(client_ca_pem)) {
    return absl::InvalidArgumentError(absl::StrCat("flag --tls-client-ca: '", o.tls_client_ca,
                                                   "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  return absl::OkStatus();
}

absl::Status SecurityOptions::Validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError("flags --tls-cert and --tls-key go together: give both or neither");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return absl::InvalidArgumentError("flag --tls-client-ca needs TLS: give --tls-cert and --tls-key too");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("flag ", flag, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag ", flag, ": '", path, "' is not a PEM file (no -----BEGIN line)"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const SecurityOptions& o) {
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  if (!o.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  absl::StatusOr<std::string> cert = ReadPemFile("--tls-cert", o.tls_cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile("--tls-key", o.tls_key);
  if (!key.ok()) return key.status();
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile("--tls-client-ca", o.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  // gRPC itself loads these only when the port is bound, and then reports a failure as a port
  // it could not bind.
  if (absl::Status s = CheckTlsFiles(o, *cert, *key, ssl.pem_root_certs); !s.ok()) return s;
  return grpc::SslServerCredentials(ssl);
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
}

std::string TransportNotice(const SecurityOptions& o, const std::string& host, const std::string& listen) {
  if (o.tls()) return "";
  if (IsLoopbackHost(host)) {
    return absl::StrCat("serving plaintext on ", listen,
                        " (loopback only; use --tls-cert/--tls-key to serve other hosts)");
  }
  return absl::StrCat("WARNING: serving plaintext on ", listen,
                      ": not a loopback address, so anyone who can reach it can read the traffic",
                      o.auth_tokens.empty() ? " and use every RPC" : " and steal bearer tokens",
                      "; use --tls-cert/--tls-key");
}

}  // namespace cmestream::service
