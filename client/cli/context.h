// Shared pieces of the `cmestream` command-line tool: exit codes, usage texts, argument parsing,
// the connection context every command receives, and the error exits (Fail, FailUsage).
#ifndef CMESTREAM_CLIENT_CLI_CONTEXT_H_
#define CMESTREAM_CLIENT_CLI_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cpp/client.h"
#include "client/cpp/sharded_client.h"

namespace cmestream::cli {

namespace v1 = ::cmestream::v1;
using client::Client;
using client::IngestStream;

constexpr int kExitServer = 1;
constexpr int kExitUsage = 2;

// Usage texts (defined in context.cc).
extern const char kMainUsage[];
extern const char kCreateUsage[];
extern const char kModelUsage[];
extern const char kDescribeUsage[];
extern const char kListUsage[];
extern const char kDeleteUsage[];
extern const char kDictionaryUsage[];
extern const char kProducerUsage[];
extern const char kSnapshotUsage[];
extern const char kExportUsage[];
extern const char kImportUsage[];
extern const char kHealthUsage[];
extern const char kCountsUsage[];
extern const char kEmbeddingUsage[];
extern const char kClustersUsage[];
extern const char kAggregationUsage[];
extern const char kLatentUsage[];
extern const char kForecastUsage[];
extern const char kIngestUsage[];
extern const char kRefreshUsage[];
extern const char kKoopmanUsage[];
extern const char kPredictUsage[];
extern const char kSimulateUsage[];

// ---------------------------------------------------------------------------------------------
// Argument parsing
// ---------------------------------------------------------------------------------------------

struct CommandSpec {
  std::set<std::string> values;    // flags taking a value
  std::set<std::string> switches;  // boolean flags
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  bool Has(const std::string& f) const { return switches.count(f) || values.count(f); }
  std::optional<std::string> Value(const std::string& f) const {
    auto it = values.find(f);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

// Parses argv[begin..) against `spec` plus the global flags. "--flag=value" and "--flag value"
// both work; a lone "-" is a positional (standard input).
absl::StatusOr<Args> ParseArgs(const std::vector<std::string>& argv, size_t begin, CommandSpec spec);
absl::StatusOr<double> ParseDouble(const std::string& flag, const std::string& text);
absl::StatusOr<uint64_t> ParseUint(const std::string& flag, const std::string& text);

// Prints "cmestream: COMMAND: message (CODE)" on stderr; returns kExitServer.
int Fail(const std::string& command, const absl::Status& status);
// Prints "cmestream: COMMAND: message" on stderr; returns kExitUsage.
int FailUsage(const std::string& command, absl::string_view message);

struct Context {
  std::string server;
  // --server ID=HOST:PORT,ID=HOST:PORT,... (or HOST:PORT,HOST:PORT: each target is its own id):
  // several daemons, each model on the owner by rendezvous hashing (core/common/placement.h).
  // Filled by ParseServerList; one pod for a single server.
  std::vector<client::Pod> pods;
  std::string model;  // the model the command is about (RouteToOwner); empty: none
  double timeout = 30;
  std::string tls_ca, tls_cert, tls_key, token;
  // Every command goes through the ShardedClient (one pod or several); `client` is the Client
  // of ctx.model's owner (of the first pod without a model). Both set by ConnectClient. Each
  // pod's Client follows one owner redirect from a sharded daemon (--shard-peers).
  std::unique_ptr<client::ShardedClient> cluster;
  Client* client = nullptr;
};

absl::Status ConnectClient(Context& ctx);
// ConnectClient for `command`: returns 0 once connected, else prints the error (FailUsage) and
// returns kExitUsage.
int NeedClient(Context& ctx, const std::string& command);

// Parses --server (one target or a comma-separated list) into ctx.pods (InvalidArgument on an
// empty entry or a repeated identity).
absl::Status ParseServerList(Context& ctx);
// The command is about `model`: ConnectClient then picks its owner's Client.
void RouteToOwner(Context& ctx, const std::string& model);

// Returns 0 if args carry exactly one positional (the model NAME), else prints the usage and
// returns kExitUsage.
int NeedName(const Args& args, const std::string& command, const char* usage);

}  // namespace cmestream::cli

#endif  // CMESTREAM_CLIENT_CLI_CONTEXT_H_
