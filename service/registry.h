// Name -> Model. The mutex guards the map only; a Model found here is used through its
// shared_ptr, so a concurrent Delete never invalidates an RPC in flight (the model object
// lives until the last holder lets go, its metric series are removed at Delete).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/batch_log.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "service/model.h"
#include "service/model_config.h"

namespace cmestream::service {

class ModelRegistry {
 public:
  // requires: metrics and log outlive the registry.
  ModelRegistry(ConfigDefaults defaults, Metrics& metrics, BatchLog& log)
      : defaults_(defaults), metrics_(metrics), log_(log) {}

  // --max-models and --max-dim, enforced by Create (default: LimitOptions' defaults).
  // requires: called before the registry is shared between threads.
  void SetLimits(const LimitOptions& limits) { limits_ = limits; }

  // InvalidArgument (bad config, dim above --max-dim), AlreadyExists, ResourceExhausted (the
  // registry already holds --max-models models).
  // The normalized config is appended to the BatchLog before the model exists (a log failure
  // refuses the creation). Replay (WAL recovery, `replay_sequence` set): `config` is the
  // logged, already normalized config; nothing is logged again.
  absl::StatusOr<std::shared_ptr<Model>> Create(const v1::ModelConfig& config,
                                                std::optional<uint64_t> replay_sequence = std::nullopt);
  // NotFound with a message naming the model.
  absl::StatusOr<std::shared_ptr<Model>> Get(const std::string& name) const;
  // Logs the deletion (unless replaying) under the model's learner lock, so no batch of the
  // model can be logged after its deletion record, then removes it.
  absl::Status Delete(const std::string& name, bool replay = false);
  // Sorted by name.
  std::vector<std::shared_ptr<Model>> List() const;

  // Snapshot restore and import (service/snapshot.h): inserts a model built by `build` from
  // its metric series and the registry's BatchLog. AlreadyExists (naming the model) if the name
  // is taken, or build's error; either way the registry is unchanged. Nothing is logged.
  using ModelBuilder =
      std::function<absl::StatusOr<std::shared_ptr<Model>>(std::shared_ptr<ModelMetrics>, BatchLog*)>;
  absl::StatusOr<std::shared_ptr<Model>> Adopt(const std::string& name, const ModelBuilder& build);

 private:
  const ConfigDefaults defaults_;
  Metrics& metrics_;
  BatchLog& log_;
  LimitOptions limits_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Model>> models_;
};

}  // namespace cmestream::service
