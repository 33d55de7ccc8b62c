// One background thread that runs a task every period, or sooner when woken, until stopped:
// the refresh scheduler's tick, the periodic snapshots and the WAL's interval fsync.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cmestream::service {

class PeriodicThread {
 public:
  // requires: period > 0. `task` runs on the thread only, never concurrently with itself, and
  // with none of this object's locks held (it may call Wake()).
  // `name` names the thread (NameThisThread: at most 15 bytes).
  PeriodicThread(absl::Duration period, std::function<void()> task, const char* name = "cme-periodic");
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread: the task first runs one period later (or at the first Wake). Once only:
  // a second call, or a call after Stop(), does nothing.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the task as soon as the thread is free, without waiting for the period; wakes during
  // a run coalesce into one more run. The next period counts from the end of that run.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  // ensures: the task is not running and never runs again (the run in progress finishes
  // first). Idempotent. Must not be called from the task.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration period_;
  const std::function<void()> task_;
  const std::string name_;
  absl::Mutex mu_;    // a leaf: never held while the task runs
  absl::CondVar cv_;  // stopping_ or wake_ became true (one waiter: the thread)
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(mu_);  // moved out and joined by Stop
};

}  // namespace cmestream::service
