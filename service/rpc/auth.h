// Bearer-token authentication and per-RPC scopes.
//
// Token file (--auth-tokens FILE): one token per line, `TOKEN SCOPES`, SCOPES comma-separated
// from admin, write, read; `#` starts a comment (whole line or after the scopes); blank lines
// are ignored. Example:
//     # producers
//     3f1c...e9 write
//     a77b...01 admin
// Scopes are levels: read < write < admin, and a token holds the highest level it lists
// (admin implies write and read; write implies read, because a producer must read its model's
// dim and its applied offset to resume). Tokens are at least 16 characters of printable ASCII
// without spaces or '#'; duplicates are an error. A file readable by others (mode & 0004) is loaded
// with a warning.
//
// Which RPC needs what (one table, ScopeTable, with a row for every RPC):
//   admin: CreateModel, DeleteModel, Snapshot, ExportModel, ImportModel
//   write: Ingest, IngestOne, GetProducer
//   read:  GetModel, ListModels, Refresh and every QueryService query (GetTimescales and
//          CkTest included, ListAlarms and WatchAlarms)
// A method missing from the table requires admin (fail closed); a test derives the RPC list from
// the proto and fails when one is missing.
// grpc.health.v1.Health and server reflection are never checked; the Prometheus endpoint is a
// separate read-only HTTP server.
//
// Why a check in each handler (Authorize, one line at the top of every handler) and not an
// AuthMetadataProcessor: the processor runs only on TLS credentials, and tokens must also
// work on plaintext loopback; the callback API's server interceptors cannot fail a call.
//
// The client sends metadata `authorization: Bearer TOKEN`. Missing or malformed header:
// UNAUTHENTICATED; unknown token: UNAUTHENTICATED; known token, level too low:
// PERMISSION_DENIED. Messages name the method and the scope, never a token. The comparison
// visits every configured token and every byte of each (no early exit), so its time does not
// depend on how much of a token matched.
#pragma once

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace cmestream::service {

enum class Scope { kNone = 0, kRead = 1, kWrite = 2, kAdmin = 3 };

// "read", "write", "admin" ("none" for kNone).
const char* ScopeName(Scope scope);

struct MethodScope {
  absl::string_view method;  // short name of a cmestream.v1 RPC ("CreateModel")
  Scope scope;
};
// The classification of every RPC of the cmestream.v1 services.
const std::vector<MethodScope>& ScopeTable();

// Scope required by a method of cmestream.v1 given by its short name ("CreateModel");
// names not in ScopeTable require admin (fail closed).
Scope RequiredScope(absl::string_view method);

class TokenAuthenticator {
 public:
  // Parses token-file text. `source` names it in errors ("FILE:LINE: ...").
  static absl::StatusOr<TokenAuthenticator> Parse(absl::string_view text, const std::string& source);
  // Reads and parses `path`. `warning` (may be null) receives a non-empty warning if the file
  // is readable by others.
  static absl::StatusOr<TokenAuthenticator> Load(const std::string& path, std::string* warning);

  // Level of `token`, kNone when unknown. Constant-time in the token contents (see above).
  Scope Lookup(absl::string_view token) const;

  // OK iff the `authorization` metadata carries "Bearer TOKEN" with a level >= `needed`.
  absl::Status Check(absl::string_view authorization, bool present, Scope needed, absl::string_view method) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    Scope scope;
  };
  std::vector<Entry> entries_;
};

// The one helper every handler calls first. `auth` null: authentication is off (OK).
absl::Status Authorize(const TokenAuthenticator* auth, const grpc::ServerContextBase& ctx, absl::string_view method);

}  // namespace cmestream::service
