// Checks a client certificate and its private key before a TLS channel is built. gRPC reads
// them only when it connects, and a key that is not the certificate's then surfaces as
// "empty address list: (UNAVAILABLE)" or a failed handshake, naming neither file; the daemon
// checks its own pair the same way at start (service/rpc/tls.cc CheckTlsFiles).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace cmestream::client {

// OK if `cert_pem` (read from cert_path) holds a certificate, `key_pem` (from key_path) an
// unencrypted private key, and the key is the certificate's; else InvalidArgument naming the
// files and what was expected.
absl::Status CheckTlsKeyPair(const std::string& cert_path, const std::string& cert_pem, const std::string& key_path,
                             const std::string& key_pem);

}  // namespace cmestream::client
