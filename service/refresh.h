// Background refresh: builds immutable, versioned views and swaps them in without blocking
// ingestion (CONTRIBUTING.md "Data flow").
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "service/model.h"
#include "service/registry.h"

namespace cmestream::service {

// Snapshot under the model's learner lock (with the drift check), then everything else off the
// lock: Koopman decomposition (top kStoredEigenpairs) and the new view, published with version
// previous + 1. Returns the new view, or nullptr while the model has no learner (warm-up).
// requires: called by one thread at a time per model (the scheduler), so versions increase.
std::shared_ptr<const ModelView> RefreshModel(Model& model);

// One thread that, every tick, refreshes each model for which a trigger fired and that has
// new samples since its view. Triggers: refresh_interval_seconds elapsed since the last
// refresh, refresh_every_samples new samples, or an explicit request (Refresh RPC).
// Models are refreshed one after another; a pool can replace the thread when many models
// need it.
class RefreshScheduler {
 public:
  struct Options {
    double tick_seconds = 0.05;  // polling period; also the resolution of waits and view age
  };
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void(absl::StatusOr<std::shared_ptr<const ModelView>>)>;

  // requires: registry outlives the scheduler.
  RefreshScheduler(ModelRegistry& registry, Options options);
  ~RefreshScheduler() { Stop(); }

  void Start();
  // Joins the thread; pending waiters get Unavailable; later Wait calls fail at once. Idempotent.
  void Stop();

  // Asks for a refresh of `model` at the next tick.
  void Request(Model& model);
  // Requests a refresh and calls `done` exactly once: with the first view reflecting at least
  // `target` samples (possibly immediately, on the caller's thread), DeadlineExceeded at
  // `deadline`, NotFound if the model is deleted meanwhile, Unavailable at shutdown.
  void Wait(std::shared_ptr<Model> model, uint64_t target, Clock::time_point deadline, Callback done);

 private:
  struct Waiter {
    std::shared_ptr<Model> model;
    uint64_t target;
    Clock::time_point deadline;
    Callback done;
  };
  void Run();
  void RefreshDueModels();
  void CompleteWaiters();

  ModelRegistry& registry_;
  const Options options_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool stopped_ = false;
  bool wake_ = false;
  std::vector<Waiter> waiters_;
};

}  // namespace cmestream::service
