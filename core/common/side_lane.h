// SideLane: an ordered queue of jobs that another thread may run while their owner goes on, so
// that one model's per-pair work can use two cores (docs/algorithms.md §9.3).
//
// The owner (the thread that learns a model's batches) pushes jobs; they run one at a time, in
// the order pushed, either on a helper thread that the executor lends the lane or, when no
// helper has taken it by the time the owner waits, on the owner itself. Which thread runs a job
// never changes what it computes: an estimator whose every update runs as jobs of one lane sees
// the same operations in the same order as in a sequential learner, so its state is the same,
// bit for bit, with any number of helpers (none included).
//
// core/ has no threads of its own: the threads come from the SideExecutor the owner is given
// (the daemon's helper pool, service/engine/helper_pool.h). Without one, Push runs the job at
// once.
//
// THREAD SAFETY: Push, WaitFor and WaitAll are the owner's (one thread at a time); RunPending is
// any helper's. A job's data is the owner's to write before Push and after WaitFor of its
// ticket; the lane's mutex orders the two threads' memory accesses.
//
// COST: a lock and a condition-variable signal per job, no heap allocation (a fixed ring).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cmestream {

class SideLane;

// Lends a thread to a lane. Offer must not block and must not run the lane's jobs itself; it may
// decline (the owner then runs the jobs when it waits). A lane lives in a shared_ptr
// (StreamingLearner's), so an executor keeps it alive with shared_from_this() while it waits.
class SideExecutor {
 public:
  virtual ~SideExecutor() = default;
  // Asks a helper thread to call lane.RunPending() soon.
  virtual void Offer(SideLane& lane) = 0;
};

class SideLane : public std::enable_shared_from_this<SideLane> {
 public:
  using Fn = void (*)(void* context, void* object, int64_t a, int64_t b);
  // Jobs that may wait at once; Push waits for (or runs) the oldest beyond that.
  static constexpr int kCapacity = 64;

  SideLane() = default;
  SideLane(const SideLane&) = delete;
  SideLane& operator=(const SideLane&) = delete;

  // Owner: appends fn(context, object, a, b) and returns its ticket (1, 2, ... in push order).
  // With no executor the job runs before Push returns.
  int64_t Push(SideExecutor* executor, Fn fn, void* context, void* object, int64_t a, int64_t b)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Owner: returns once the job `ticket` and every job before it have run, running them itself
  // when no helper is running the lane.
  void WaitFor(int64_t ticket) ABSL_LOCKS_EXCLUDED(mu_);
  void WaitAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Owner: true when every pushed job has run.
  bool Idle() const ABSL_LOCKS_EXCLUDED(mu_);

  // Helper: runs the waiting jobs in order until none is left; returns at once when another
  // thread is running them.
  void RunPending() ABSL_LOCKS_EXCLUDED(mu_);

  // Executor: true for the first call since the last ClearOffered, so a lane waits in an
  // executor's queue at most once.
  bool MarkOffered() { return !offered_.exchange(true); }
  void ClearOffered() { offered_.store(false); }

  // Jobs that ran on a helper thread / on the owner (diagnostics, tests).
  int64_t ran_on_helper() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t ran_on_owner() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    Fn fn = nullptr;
    void* context = nullptr;
    void* object = nullptr;
    int64_t a = 0, b = 0;
  };
  // Runs jobs until the lane is empty (or, for the owner, `ticket` has run); requires running_
  // claimed by this thread. Releases mu_ around each job.
  void Drain(int64_t ticket, bool helper) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The owner's wait for `ticket` (WaitFor, and Push on a full ring).
  void WaitForLocked(int64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar done_;  // a job finished, or running_ became false
  std::array<Job, kCapacity> ring_ ABSL_GUARDED_BY(mu_);
  int64_t pushed_ ABSL_GUARDED_BY(mu_) = 0;    // tickets handed out
  int64_t finished_ ABSL_GUARDED_BY(mu_) = 0;  // jobs run, in ticket order
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // a thread is in Drain
  int64_t on_helper_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t on_owner_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> offered_{false};
};

}  // namespace cmestream
