#include "service/rpc/auth.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "service/enum_names.h"

namespace cmestream::service {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;

// The scopes a token file names, for parsing it and for ScopeName alike (kNone has no name a
// token file may use).
constexpr EnumName<Scope> kScopeNames[] = {{Scope::kAdmin, "admin"}, {Scope::kWrite, "write"}, {Scope::kRead, "read"}};

bool TokenChars(absl::string_view t) {
  for (char c : t) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// Equal iff same length and bytes; visits max(|a|, |b|) bytes whatever they contain.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

const char* ScopeName(Scope scope) { return NameOf(kScopeNames, scope, "none"); }

const std::vector<MethodScope>& ScopeTable() {
  // One row per RPC of the cmestream.v1 services. test_security.cc checks this table against the
  // methods in the proto (every method listed exactly once, no stale rows), so a new RPC fails
  // that test until it is classified here. Read-only queries are read: a read token must be able
  // to run every `cmestream` command that only looks (timescales and cktest included).
  static const std::vector<MethodScope> kTable = {
      {"CreateModel", Scope::kAdmin}, {"DeleteModel", Scope::kAdmin},  {"Snapshot", Scope::kAdmin},
      {"ExportModel", Scope::kAdmin}, {"ImportModel", Scope::kAdmin},  {"Ingest", Scope::kWrite},
      {"IngestOne", Scope::kWrite},   {"GetProducer", Scope::kWrite},  {"GetModel", Scope::kRead},
      {"ListModels", Scope::kRead},   {"Refresh", Scope::kRead},       {"GetKoopman", Scope::kRead},
      {"Predict", Scope::kRead},      {"GetDictionary", Scope::kRead}, {"GetCounts", Scope::kRead},
      {"GetEmbedding", Scope::kRead}, {"GetClusters", Scope::kRead},   {"GetAggregation", Scope::kRead},
      {"GetLatent", Scope::kRead},    {"Forecast", Scope::kRead},      {"GetTimescales", Scope::kRead},
      {"CkTest", Scope::kRead},       {"ListAlarms", Scope::kRead},    {"WatchAlarms", Scope::kRead},
  };
  return kTable;
}

Scope RequiredScope(absl::string_view method) {
  for (const MethodScope& row : ScopeTable()) {
    if (row.method == method) return row.scope;
  }
  return Scope::kAdmin;  // not listed: fail closed
}

absl::StatusOr<TokenAuthenticator> TokenAuthenticator::Parse(absl::string_view text, const std::string& source) {
  TokenAuthenticator auth;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": ", what));
    };
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    if (fields.size() != 2) {
      return bad(absl::StrCat("expected 'TOKEN SCOPES' (scopes comma-separated from admin,write,read), got ",
                              fields.size(), " fields"));
    }
    const absl::string_view token = fields[0];
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength || !TokenChars(token)) {
      return bad(absl::StrCat("token of ", token.size(), " characters, expected ", kMinTokenLength, "..",
                              kMaxTokenLength, " printable characters (e.g. from `openssl rand -hex 32`)"));
    }
    Scope level = Scope::kNone;
    for (absl::string_view s : absl::StrSplit(fields[1], ',')) {
      const std::optional<Scope> this_scope = ValueOf(kScopeNames, s);
      if (!this_scope) {
        return bad(absl::StrCat("unknown scope '", s.substr(0, 40), "', expected admin, write or read"));
      }
      level = std::max(level, *this_scope);
    }
    for (const Entry& e : auth.entries_) {
      if (e.token == token) return bad("the token is listed twice");
    }
    auth.entries_.push_back(Entry{std::string(token), level});
  }
  if (auth.entries_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no tokens (every request would be refused)"));
  }
  return auth;
}

absl::StatusOr<TokenAuthenticator> TokenAuthenticator::Load(const std::string& path, std::string* warning) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("flag --auth-tokens: cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  struct stat st {};
  if (warning != nullptr && ::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    *warning = absl::StrCat("token file '", path, "' is readable by every user (mode ", mode, "); chmod 600 it");
  }
  return Parse(text.str(), path);
}

Scope TokenAuthenticator::Lookup(absl::string_view token) const {
  Scope found = Scope::kNone;
  for (const Entry& e : entries_) {  // no early exit: every token is compared
    if (ConstantTimeEquals(token, e.token)) found = e.scope;
  }
  return found;
}

absl::Status TokenAuthenticator::Check(absl::string_view authorization, bool present, Scope needed,
                                       absl::string_view method) const {
  if (!present) {
    return absl::UnauthenticatedError(absl::StrCat(method, " requires a bearer token (metadata 'authorization: Bearer ",
                                                   "TOKEN', scope ", ScopeName(needed), "); none was sent"));
  }
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWithIgnoreCase(authorization, kBearer)) {
    return absl::UnauthenticatedError(absl::StrCat(method, ": the authorization metadata is not 'Bearer TOKEN'"));
  }
  const Scope have = Lookup(absl::StripAsciiWhitespace(authorization.substr(kBearer.size())));
  if (have == Scope::kNone) {
    return absl::UnauthenticatedError(absl::StrCat(method, ": the bearer token is not valid for this daemon"));
  }
  if (have < needed) {
    return absl::PermissionDeniedError(absl::StrCat(method, " requires scope '", ScopeName(needed),
                                                    "'; this token has scope '", ScopeName(have), "'"));
  }
  return absl::OkStatus();
}

absl::Status Authorize(const TokenAuthenticator* auth, const grpc::ServerContextBase& ctx, absl::string_view method) {
  if (auth == nullptr) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  absl::string_view value;
  if (it != md.end()) value = absl::string_view(it->second.data(), it->second.size());
  return auth->Check(value, it != md.end(), RequiredScope(method), method);
}

}  // namespace cmestream::service
