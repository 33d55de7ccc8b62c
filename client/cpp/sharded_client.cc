#include "client/cpp/sharded_client.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/placement.h"

namespace cmestream::client {

absl::StatusOr<std::vector<Pod>> ParsePods(const std::string& list) {
  std::vector<Pod> pods;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    if (entry.empty()) return absl::InvalidArgumentError(absl::StrCat("server list '", list, "': empty entry"));
    const size_t eq = entry.find('=');
    Pod pod{std::string(eq == absl::string_view::npos ? entry : entry.substr(0, eq)),
            std::string(eq == absl::string_view::npos ? entry : entry.substr(eq + 1))};
    if (pod.id.empty() || pod.target.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("server list: expected ID=HOST:PORT or HOST:PORT, got '", entry, "'"));
    }
    if (!seen.insert(pod.id).second) {
      return absl::InvalidArgumentError(absl::StrCat("server list: '", pod.id, "' twice"));
    }
    pods.push_back(std::move(pod));
  }
  return pods;
}

absl::StatusOr<std::unique_ptr<ShardedClient>> ShardedClient::Connect(const ClientOptions& options,
                                                                      std::vector<Pod> pods) {
  if (pods.empty()) return absl::InvalidArgumentError("ShardedClient: expected at least one pod");
  std::unique_ptr<ShardedClient> c(new ShardedClient());
  for (const Pod& pod : pods) {
    ClientOptions o = options;
    o.target = pod.target;
    o.follow_owner = true;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
    if (!client.ok()) return client.status();
    c->clients_.push_back(*std::move(client));
    c->ids_.push_back(pod.id);
  }
  c->pods_ = std::move(pods);
  return c;
}

const Pod& ShardedClient::Owner(const std::string& model) const {
  return pods_[placement::PlacementOwner(model, ids_)];
}

Client& ShardedClient::For(const std::string& model) { return *clients_[placement::PlacementOwner(model, ids_)]; }

absl::StatusOr<std::vector<v1::ModelInfo>> ShardedClient::List() {
  std::vector<v1::ModelInfo> all;
  for (size_t i = 0; i < clients_.size(); ++i) {
    absl::StatusOr<std::vector<v1::ModelInfo>> some = clients_[i]->List();
    if (!some.ok()) {
      return absl::Status(some.status().code(),
                          absl::StrCat("pod ", pods_[i].id, " (", pods_[i].target, "): ", some.status().message()));
    }
    all.insert(all.end(), some->begin(), some->end());
  }
  return all;
}

}  // namespace cmestream::client
