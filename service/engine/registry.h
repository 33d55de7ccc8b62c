// Name -> Model. The mutex guards the map only; a Model found here is used through its
// shared_ptr, so a concurrent Delete never invalidates an RPC in flight (the model object
// lives until the last holder lets go, its metric series are removed at Delete).
//
// The registry lock is never held across I/O or while waiting for a model: Create, Adopt and
// Delete reserve the name under it, then build / log durably / mark the model deleted without
// it, then publish the outcome under it again. A name with a change in progress is refused by
// Create and Adopt (AlreadyExists) and waited for by Delete; ListAtCut (the snapshot cut)
// waits until no change is in progress, so every creation, import or deletion record <= the
// cut is reflected in the models it returns. Lock order: service/README.md "Locks".
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/engine/batch_log.h"
#include "service/engine/limits.h"
#include "service/engine/memory_budget.h"
#include "service/engine/model.h"
#include "service/engine/model_config.h"
#include "service/observability/metrics.h"

namespace cmestream::service {

class ModelRegistry final : public ForkSink {
 public:
  // requires: metrics and log outlive the registry.
  ModelRegistry(ConfigDefaults defaults, Metrics& metrics, BatchLog& log)
      : defaults_(defaults), metrics_(metrics), log_(log) {}

  // --max-models, --max-dim and --max-memory, enforced by Create and by imports (default:
  // LimitOptions' defaults; max_memory_bytes 0 = DefaultMemoryBudget()).
  // requires: called before the registry is shared between threads.
  void SetLimits(const LimitOptions& limits);
  // The helper threads every model's learner is lent from now on (HelperPool; null: none).
  // requires: called before the registry is shared between threads; outlives the models' calls.
  void SetSideExecutor(SideExecutor* executor) { side_executor_ = executor; }
  // Where idle models are evicted to (Model's EVICTION; null: never evicted). requires: called
  // before the registry is shared between threads; outlives the models.
  void SetSpill(ModelSpill* spill) { spill_ = spill; }
  ModelSpill* spill() const { return spill_; }
  // The eviction sweep (run by the refresh scheduler's thread, RefreshScheduler): evicts the
  // models idle for `idle_seconds` whose view reflects what they learned, until `budget_seconds`
  // have been spent (the rest wait for the next sweep). Returns the models evicted.
  int EvictIdle(double idle_seconds, double budget_seconds) ABSL_LOCKS_EXCLUDED(mu_);
  // The memory budget in force and the bytes its models hold or were granted, by their
  // dictionaries' capacities (memory_budget.h, MemoryLedger); the metrics and describe report them.
  double memory_budget() const { return ledger_.budget(); }
  double committed_bytes() const;
  const MemoryLedger& ledger() const { return ledger_; }
  const ConfigDefaults& defaults() const { return defaults_; }
  // The daemon's metrics (the refresh scheduler's fleet series).
  Metrics& metrics() const { return metrics_; }
  const LimitOptions& limits() const { return limits_; }

  // InvalidArgument (bad config, dim above --max-dim), AlreadyExists, ResourceExhausted (the
  // registry already holds --max-models models, or the model's estimated size does not fit
  // what is left of --max-memory, or its allocation failed).
  // The name is reserved (limits checked, counting reservations), then the model is built (an
  // allocation failure leaves nothing behind), then its normalized config is appended to the
  // BatchLog (a log failure refuses the creation), then it becomes visible; building and
  // logging run without the registry lock. Replay (WAL recovery, `replay_sequence` set):
  // `config` is the logged, already normalized config; nothing is logged again.
  absl::StatusOr<std::shared_ptr<Model>> Create(const v1::ModelConfig& config,
                                                std::optional<uint64_t> replay_sequence = std::nullopt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NotFound with a message naming the model.
  absl::StatusOr<std::shared_ptr<Model>> Get(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  // Logs the deletion (unless replaying) through Model::MarkDeleted, so no batch of the model
  // can be logged after its deletion record, then removes it. MarkDeleted waits for a batch of
  // the model being written and for the deletion record's fdatasync: without the registry
  // lock, so other RPCs go on meanwhile. A concurrent Delete of the same name waits for this
  // one, then answers NotFound.
  absl::Status Delete(const std::string& name, bool replay = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Sorted by name.
  std::vector<std::shared_ptr<Model>> List() const ABSL_LOCKS_EXCLUDED(mu_);
  // The models and the log's last sequence read together under the registry lock once no
  // creation, import or deletion is in progress (a snapshot's cut): a model created, imported
  // or deleted after the cut has its record above it. May wait for changes in progress.
  std::vector<std::shared_ptr<Model>> ListAtCut(uint64_t* last_sequence) const ABSL_LOCKS_EXCLUDED(mu_);

  // Snapshot restore and import (service/storage/snapshot.h): inserts a model built by `build` from
  // its metric series and the registry's BatchLog. AlreadyExists (naming the model) if the name
  // is taken, or build's error; either way the registry is unchanged. The name is reserved
  // first; `build` runs without the registry lock. With `import_image` (a live import, not a
  // restore or a replay) the model must fit --max-models and the memory budget, and is then
  // logged as an import record (the whole export file, without the registry lock), like a
  // creation; its applied sequence becomes the record's sequence.
  using ModelBuilder = std::function<absl::StatusOr<std::shared_ptr<Model>>(std::shared_ptr<ModelMetrics>, BatchLog*)>;
  absl::StatusOr<std::shared_ptr<Model>> Adopt(const std::string& name, const ModelBuilder& build,
                                               const std::string* import_image = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Forks (ModelConfig.on_change "fork", docs/user-guide.md "After a change"): hands fork
  // `plan.current` of `parent` the batch's pairs before its first new alarm, and starts fork
  // current + 1, ... at each new alarm with the pairs from it on. A fork is found by name
  // ("<parent>.k") and used only if its fork_of and fork_index match (a replay finds the forks a
  // snapshot restored; a model of that name made otherwise is left alone). A new fork is not
  // logged: it is derived from the parent's logged batches, so replay starts it again; it
  // counts against --max-models and --max-memory like a creation, and when refused (or the name
  // is taken) the alarm starts no fork and the daemon's log says why.
  void Forward(const Model& parent, const ForkPlan& plan, const StreamBatch& applied, uint64_t sequence) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The fork `k` of `parent` started at alarm `index` if it exists (else null).
  std::shared_ptr<Model> FindFork(const Model& parent, int64_t k, int64_t index) const ABSL_LOCKS_EXCLUDED(mu_);
  // FindFork, else a new fork built and published without a log record; null when refused.
  std::shared_ptr<Model> StartFork(const Model& parent, int64_t k, int64_t index) ABSL_LOCKS_EXCLUDED(mu_);

  const ConfigDefaults defaults_;
  Metrics& metrics_;
  BatchLog& log_;
  LimitOptions limits_;
  MemoryLedger ledger_;
  SideExecutor* side_executor_ = nullptr;
  ModelSpill* spill_ = nullptr;
  // Counts `bytes` (the model's floor, or an import's held bytes) in the ledger, or
  // ResourceExhausted naming the model, the bytes and the budget (`verb`: "create", ...).
  absl::Status AdmitLocked(const v1::ModelConfig& config, double bytes, const char* verb)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Models plus reserved names: what --max-models counts.
  size_t HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return models_.size() + reserved_.size(); }
  // A name is taken by a model or by a creation/import in progress.
  bool TakenLocked(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return models_.count(name) > 0 || reserved_.count(name) > 0;
  }
  // Publishes the end of a change (reservation or deletion) to ListAtCut and Delete.
  void EndChangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { changed_.SignalAll(); }
  // `charged`: the bytes counted in the ledger for it (released if `model` failed).
  absl::StatusOr<std::shared_ptr<Model>> Publish(const std::string& name, const std::shared_ptr<ModelMetrics>& metrics,
                                                 absl::StatusOr<std::shared_ptr<Model>> model, double charged)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Second in the lock order (service/README.md "Locks"): after the snapshot writer's and the
  // refresh scheduler's locks; a model's locks, the WAL's and the metrics' are taken under it.
  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;  // a reservation or deletion ended
  std::map<std::string, std::shared_ptr<Model>> models_ ABSL_GUARDED_BY(mu_);
  // Creations and imports in progress: name -> config once known (counted by the memory
  // budget from then on; an import's config is known once built).
  std::map<std::string, std::optional<v1::ModelConfig>> reserved_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> deleting_ ABSL_GUARDED_BY(mu_);  // deletions in progress (still in models_)
};

}  // namespace cmestream::service
