// Background refresh: builds immutable, versioned views and swaps them in without blocking
// ingestion (CONTRIBUTING.md "Data flow").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/engine/model.h"
#include "service/engine/periodic_thread.h"
#include "service/engine/registry.h"

namespace cmestream::service {

// Snapshot under the model's learner lock (with the drift check), then everything else off the
// lock: Koopman decomposition (top kStoredEigenpairs) and the new view, published with version
// previous + 1. Returns the new view, or nullptr while the model has no learner (warm-up).
// requires: called by one thread at a time per model (the scheduler), so versions increase.
std::shared_ptr<const ModelView> RefreshModel(Model& model);

// One thread that, every tick, refreshes each model for which a trigger fired and that has
// new samples since its view. Triggers: refresh_interval_seconds elapsed since the last
// refresh, and at least kPeriodicIdlePerBuild times the last view's build time (periodic views
// take at most a tenth of a core per model); refresh_every_samples new samples; or an explicit
// request (Refresh RPC).
// Models are refreshed one after another; a pool can replace the thread when many models
// need it.
class RefreshScheduler {
 public:
  static constexpr double kPeriodicIdlePerBuild = 9;

  struct Options {
    double tick_seconds = 0.05;  // polling period; also the resolution of waits and view age
    // --evict-idle-seconds (0: never): the sweep evicts models idle this long
    // (ModelRegistry::EvictIdle), at most every kSweepSeconds, spending at most
    // kSweepBudgetSeconds of this thread per sweep on it.
    double evict_idle_seconds = 0;
  };
  static constexpr double kSweepSeconds = 1;
  static constexpr double kSweepBudgetSeconds = 0.25;
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void(absl::StatusOr<std::shared_ptr<const ModelView>>)>;

  // requires: registry outlives the scheduler.
  RefreshScheduler(ModelRegistry& registry, Options options);
  ~RefreshScheduler() { Stop(); }

  void Start();
  // Joins the thread; pending waiters get Unavailable; later Wait calls fail at once. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Asks for a refresh of `model` at the next tick.
  void Request(Model& model) ABSL_LOCKS_EXCLUDED(mu_);
  // Requests a refresh and calls `done` exactly once: with the first view reflecting at least
  // `target` learned pairs (Model::Stats::progress; possibly immediately, on the caller's thread), DeadlineExceeded at
  // `deadline`, NotFound if the model is deleted meanwhile, Unavailable at shutdown.
  void Wait(std::shared_ptr<Model> model, uint64_t target, Clock::time_point deadline, Callback done)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    std::shared_ptr<Model> model;
    uint64_t target;
    Clock::time_point deadline;
    Callback done;
  };
  void RefreshDueModels() ABSL_LOCKS_EXCLUDED(mu_);
  void CompleteWaiters() ABSL_LOCKS_EXCLUDED(mu_);
  void SweepIdleModels();  // the scheduler thread only

  ModelRegistry& registry_;
  const Options options_;
  Clock::time_point last_sweep_ = Clock::now();  // the scheduler thread only
  PeriodicThread thread_;                        // every tick_seconds, or at once when woken by Request / Wait
  // Lock order (service/README.md "Locks"): taken before the registry's lock and a model's
  // view lock (CompleteWaiters looks models up under it); never held while a view is built.
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cmestream::service
