// HelperPool: the threads that lend a model's learner a second core (docs/algorithms.md §9.3).
//
// A learner with an executor hands part of each batch's work to its side lane
// (core/common/side_lane.h) and offers the lane here; a helper thread that is free runs the
// lane's jobs while the ingest worker that owns the model goes on with the rest. A lane offered
// while every helper is busy waits in a FIFO; its owner runs its jobs itself when it needs them
// first, so a busy pool never stalls a model, and no result depends on which thread ran a job.
#pragma once

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/common/side_lane.h"

namespace cmestream::service {

class HelperPool final : public SideExecutor {
 public:
  // `threads` helpers (>= 1).
  explicit HelperPool(int threads);
  // Joins the helpers; lanes still waiting are dropped (their owners run their jobs).
  ~HelperPool() override;
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  void Offer(SideLane& lane) override ABSL_LOCKS_EXCLUDED(mu_);

  int threads() const { return static_cast<int>(workers_.size()); }
  // Default: one helper per core beyond the first (at least one), since each model's own ingest
  // worker keeps one core.
  static int DefaultThreads();

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::shared_ptr<SideLane>> offered_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace cmestream::service
