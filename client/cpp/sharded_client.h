// ShardedClient: one client over several cmestreamd pods, each model's calls on its owner.
//
// Placement is rendezvous hashing of the model name over the pods' identities (core/common/placement.h,
// the same function as the Python ShardedClient and the daemons' --shard-peers check). Each
// pod's Client follows one owner redirect (ClientOptions::follow_owner): when the daemons know
// a different placement than this client (e.g. the pod set changed), a call still reaches the
// owner the daemon names, or fails with that refusal.
//
// Thread safety: as Client (thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/client.h"

namespace cmestream::client {

struct Pod {
  std::string id;      // stable identity (StatefulSet pod name), the placement input
  std::string target;  // HOST:PORT
};

// "ID=HOST:PORT,ID=HOST:PORT,..." or "HOST:PORT,HOST:PORT,..." (each target its own identity);
// a single target is one pod. InvalidArgument on an empty entry or a repeated identity.
absl::StatusOr<std::vector<Pod>> ParsePods(const std::string& list);

class ShardedClient {
 public:
  // One Client per pod, each with `options` (target replaced, follow_owner on).
  static absl::StatusOr<std::unique_ptr<ShardedClient>> Connect(const ClientOptions& options, std::vector<Pod> pods);

  // The pod that owns `model`.
  const Pod& Owner(const std::string& model) const;
  // The Client of the owner of `model`: every call of that model goes through it.
  Client& For(const std::string& model);
  // The Client of pods()[i].
  Client& pod_client(size_t i) { return *clients_[i]; }
  const std::vector<Pod>& pods() const { return pods_; }

  // ModelInfo of every model of every pod (the first failing pod's error, prefixed by its id).
  absl::StatusOr<std::vector<v1::ModelInfo>> List();

 private:
  ShardedClient() = default;
  std::vector<Pod> pods_;
  std::vector<std::string> ids_;
  std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace cmestream::client
