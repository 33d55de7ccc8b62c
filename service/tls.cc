#include "service/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace cmestream::service {

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
