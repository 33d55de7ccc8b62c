// Daemon-side model ownership when several cmestreamd pods share the models.
//
// With --shard-self ID --shard-peers ID=HOST:PORT,... the daemon knows the whole placement:
// a model belongs to the peer whose identity wins the rendezvous hash of the model's name
// (core/common/placement.h, the one C++ implementation, shared with the clients). A call naming
// a model this daemon does not own is refused with FAILED_PRECONDITION; the message names the
// owner and the trailing metadata `cmestream-owner: ID=HOST:PORT` carries it for clients, which
// follow it once. Nothing is registered, logged or learned for a refused call.
//
// Without the flags the daemon owns every model (one pod, the default).
//
// The rebalancing tool moves models whose owner changed: it sends `cmestream-placement: ignore`
// metadata, which only the lifecycle calls that move a model honor (GetModel, ExportModel,
// ImportModel, DeleteModel; each keeps its own auth scope). Ingestion and queries never bypass
// the check, so a daemon never learns data for a model it does not own.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace cmestream::service {

inline constexpr char kOwnerTrailer[] = "cmestream-owner";
inline constexpr char kPlacementHeader[] = "cmestream-placement";  // value "ignore"

struct ShardOptions {
  std::string self;                                        // --shard-self ID; empty = owns all
  std::vector<std::pair<std::string, std::string>> peers;  // --shard-peers, ID -> HOST:PORT

  bool enabled() const { return !self.empty(); }
  // OK when off, or when self is one of >= 1 distinct, non-empty peers with non-empty targets.
  absl::Status Validate() const;
};

// "ID=HOST:PORT,ID=HOST:PORT,..." -> peers. InvalidArgument names the bad entry.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParsePeers(std::string_view text);

class Ownership {
 public:
  explicit Ownership(ShardOptions options);

  // Whether the calls of `model` may be served here. When not: FAILED_PRECONDITION naming the
  // owner, and the `cmestream-owner` trailer added to `ctx`. `allow_override`: the caller's
  // `cmestream-placement: ignore` header is honored (lifecycle calls of the rebalancer only).
  absl::Status Check(std::string_view model, grpc::ServerContextBase& ctx, bool allow_override = false) const;

  // The owner's index into options().peers (-1 when sharding is off).
  int OwnerOf(std::string_view model) const;
  const ShardOptions& options() const { return options_; }

 private:
  ShardOptions options_;
  std::vector<std::string> ids_;  // peers' identities, in peers order (placement input)
};

}  // namespace cmestream::service
