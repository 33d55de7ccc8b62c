#include "client/cpp/tls_key_pair.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cmestream::client {
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

// Never prompts for a passphrase: an encrypted key simply does not load.
int NoPassphrase(char*, int, int, void*) { return 0; }

std::unique_ptr<BIO, BioFree> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Leaves OpenSSL's thread-local error queue empty, so gRPC's own use of OpenSSL on this thread
// never sees a stale error from these parses.
struct ClearOpenSslErrors {
  ~ClearOpenSslErrors() { ERR_clear_error(); }
};

}  // namespace

absl::Status CheckTlsKeyPair(const std::string& cert_path, const std::string& cert_pem, const std::string& key_path,
                             const std::string& key_pem) {
  ClearOpenSslErrors clear;
  auto cert_bio = MemBio(cert_pem);
  std::unique_ptr<X509, X509Free> cert(cert_bio ? PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr)
                                                : nullptr);
  if (!cert) {
    return absl::InvalidArgumentError(absl::StrCat("TLS client certificate: '", cert_path,
                                                   "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  auto key_bio = MemBio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr) : nullptr);
  if (!key) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS client key: '", key_path, "' holds no private key that can be read",
                     absl::StrContains(key_pem, "ENCRYPTED")
                         ? ": it is encrypted with a passphrase; an unencrypted key is expected"
                         : " (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    char subject[256];
    X509_NAME_oneline(X509_get_subject_name(cert.get()), subject, sizeof subject);
    return absl::InvalidArgumentError(absl::StrCat("TLS client certificate and key do not match: the private key in '",
                                                   key_path, "' is not the key of the certificate in '", cert_path,
                                                   "' (subject ", subject, ")"));
  }
  return absl::OkStatus();
}

}  // namespace cmestream::client
