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

  // --max-models, --max-dim and --max-memory, enforced by Create and by imports (default:
  // LimitOptions' defaults; max_memory_bytes 0 = DefaultMemoryBudget()).
  // requires: called before the registry is shared between threads.
  void SetLimits(const LimitOptions& limits);
  // The memory budget in force and the estimated bytes its models may grow to
  // (memory_budget.h); the metrics and describe report them.
  double memory_budget() const { return memory_budget_; }
  double committed_bytes() const;
  const ConfigDefaults& defaults() const { return defaults_; }
  const LimitOptions& limits() const { return limits_; }

  // InvalidArgument (bad config, dim above --max-dim), AlreadyExists, ResourceExhausted (the
  // registry already holds --max-models models, or the model's estimated size does not fit
  // what is left of --max-memory, or its allocation failed).
  // The model is built first (an allocation failure leaves nothing behind), then its
  // normalized config is appended to the BatchLog (a log failure refuses the creation), then
  // it becomes visible. Replay (WAL recovery, `replay_sequence` set): `config` is the
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
  // The models and the log's last sequence read together under the registry lock (a snapshot's
  // cut): a model created, imported or deleted after the cut has its record above it.
  std::vector<std::shared_ptr<Model>> ListAtCut(uint64_t* last_sequence) const;

  // Snapshot restore and import (service/snapshot.h): inserts a model built by `build` from
  // its metric series and the registry's BatchLog. AlreadyExists (naming the model) if the name
  // is taken, or build's error; either way the registry is unchanged. `build` runs under the
  // registry lock. With `import_image` (a live import, not a restore or a replay) the model
  // must fit --max-models and the memory budget, and is then logged as an import record (the
  // whole export file) under the same lock, like a creation; its applied sequence becomes the
  // record's sequence.
  using ModelBuilder =
      std::function<absl::StatusOr<std::shared_ptr<Model>>(std::shared_ptr<ModelMetrics>, BatchLog*)>;
  absl::StatusOr<std::shared_ptr<Model>> Adopt(const std::string& name, const ModelBuilder& build,
                                               const std::string* import_image = nullptr);

 private:
  const ConfigDefaults defaults_;
  Metrics& metrics_;
  BatchLog& log_;
  LimitOptions limits_;
  double memory_budget_ = 0;
  // OK or ResourceExhausted naming the model, its estimate and the budget. requires mu_.
  absl::Status CheckBudgetLocked(const v1::ModelConfig& config) const;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Model>> models_;
};

}  // namespace cmestream::service
