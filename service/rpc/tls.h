// Transport security and authentication options of cmestreamd and the
// gRPC server credentials built from them.
//
//   --tls-cert FILE --tls-key FILE   PEM server certificate (chain) and private key: TLS on
//   [--tls-client-ca FILE]           PEM CA bundle: clients must present a certificate signed by
//                                    it (REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY)
//   --auth-tokens FILE               bearer tokens with scopes (auth.h)
// Without --tls-cert the daemon serves plaintext; it says so on stderr at start, and warns
// loudly when the listen host is not a loopback address.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace cmestream::service {

struct SecurityOptions {
  std::string tls_cert;       // PEM file; with tls_key
  std::string tls_key;        // PEM file; with tls_cert
  std::string tls_client_ca;  // PEM file; requires tls_cert; empty: no client certificates
  std::string auth_tokens;    // token file; empty: no authentication

  bool tls() const { return !tls_cert.empty(); }
  // OK or InvalidArgument naming the flags (cert and key go together; a client CA needs TLS).
  absl::Status Validate() const;
};

// Credentials for ServerBuilder::AddListeningPort: insecure without TLS, else SSL with the
// files' contents. Errors name the flag and the file (missing, unreadable, not PEM, a key that
// is not the certificate's: CheckTlsFiles).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const SecurityOptions& options);

// What gRPC would find only when binding the port (and then report as a port it cannot bind):
// the certificate file holds a certificate, the key file a private key that loads without a
// passphrase, the key is the certificate's, and the client CA file (if any) holds a
// certificate. InvalidArgument naming the flags and files. Uses OpenSSL (gRPC's own TLS library
// on Debian).
absl::Status CheckTlsFiles(const SecurityOptions& options, const std::string& cert_pem, const std::string& key_pem,
                           const std::string& client_ca_pem);

// True for 127.0.0.0/8, ::1 (with or without brackets) and "localhost".
bool IsLoopbackHost(const std::string& host);

// What the daemon logs about its transport at start (stderr), e.g.
// "serving plaintext on 0.0.0.0:50051: not a loopback address, anyone who can reach it can read
// and send data; use --tls-cert/--tls-key". Empty for TLS.
std::string TransportNotice(const SecurityOptions& options, const std::string& host, const std::string& listen);

// Reads a whole file; NotFound/InvalidArgument name `flag` and `path`.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

}  // namespace cmestream::service
