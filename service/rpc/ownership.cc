#include "service/rpc/ownership.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/placement.h"

namespace cmestream::service {

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParsePeers(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> peers;
  for (absl::string_view entry : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || eq == 0 || eq + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --shard-peers: expected ID=HOST:PORT,ID=HOST:PORT,..., got entry '", entry, "'"));
    }
    peers.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return peers;
}

absl::Status ShardOptions::Validate() const {
  if (!enabled()) {
    if (!peers.empty()) return absl::InvalidArgumentError("flag --shard-peers needs --shard-self (this pod's ID)");
    return absl::OkStatus();
  }
  if (peers.empty())
    return absl::InvalidArgumentError("flag --shard-self needs --shard-peers (every pod's ID=HOST:PORT)");
  std::set<std::string> seen;
  bool self_listed = false;
  for (const auto& [id, target] : peers) {
    if (id.empty() || target.empty()) return absl::InvalidArgumentError("flag --shard-peers: empty ID or target");
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("flag --shard-peers: ID '", id, "' appears twice"));
    }
    self_listed |= id == self;
  }
  if (!self_listed) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --shard-self is '", self, "', which is not one of the IDs of --shard-peers"));
  }
  return absl::OkStatus();
}

Ownership::Ownership(ShardOptions options) : options_(std::move(options)) {
  for (const auto& [id, target] : options_.peers) ids_.push_back(id);
}

int Ownership::OwnerOf(std::string_view model) const {
  if (!options_.enabled()) return -1;
  return placement::PlacementOwner(model, ids_);
}

absl::Status Ownership::Check(std::string_view model, grpc::ServerContextBase& ctx, bool allow_override) const {
  if (!options_.enabled()) return absl::OkStatus();
  const int owner = OwnerOf(model);
  const auto& [id, target] = options_.peers[owner];
  if (id == options_.self) return absl::OkStatus();
  if (allow_override) {
    const auto& headers = ctx.client_metadata();
    for (auto [it, end] = headers.equal_range(kPlacementHeader); it != end; ++it) {
      if (std::string_view(it->second.data(), it->second.size()) == "ignore") return absl::OkStatus();
    }
  }
  ctx.AddTrailingMetadata(kOwnerTrailer, absl::StrCat(id, "=", target));
  return absl::FailedPreconditionError(absl::StrCat("model '", std::string(model), "' is owned by pod ", id, " (",
                                                    target, "), not by this pod (", options_.self,
                                                    "): send its calls there (trailer ", kOwnerTrailer, ")"));
}

}  // namespace cmestream::service
