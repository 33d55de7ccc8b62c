// Learning off the RPC threads: per-key ordered work queues executed by a
// fixed pool of worker threads.
//
// Each key (the daemon uses the Model) has a FIFO of tasks; at most one task of a key runs at
// a time, in submission order, so a model's batches are de-duplicated, logged and applied in
// the order they were accepted. Tasks of different keys run in parallel on the workers. A key
// with work sits in one ready list; a worker takes the key at its head, runs ONE task, and puts
// the key back at the tail if more tasks wait — a busy model cannot starve the others.
// gRPC handlers only validate and Submit; the task completes the RPC (the callback API allows
// Finish/StartWrite from any thread), so no gRPC thread ever waits for a learner or an
// fdatasync, and queries and admin RPCs always find a free gRPC thread.
// Admission (bounding what waits) is the caller's: Ingestor uses IngestQueue (limits.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cmestream::service {

class IngestPool {
 public:
  using Task = std::function<void()>;

  // `threads` workers (>= 1). `nice` (0..19): each worker lowers its own scheduling priority by
  // that much at start (Linux: setpriority on the thread id, which affects that thread only;
  // elsewhere ignored), so under CPU contention the gRPC threads answering queries and admin
  // RPCs run before learning. 0 = same priority as the rest of the daemon. Unprivileged
  // processes may raise nice but not lower it back, so this is one-way for the thread.
  explicit IngestPool(int threads, int nice = 0);
  // Runs every task already submitted, then joins the workers.
  ~IngestPool();
  IngestPool(const IngestPool&) = delete;
  IngestPool& operator=(const IngestPool&) = delete;

  // Appends `task` to `key`'s queue. `keep_alive` (may be null) is held until the task ran, so
  // the key's object outlives its queue. Never blocks on other tasks. Thread-safe.
  void Submit(const void* key, std::shared_ptr<void> keep_alive, Task task) ABSL_LOCKS_EXCLUDED(mu_);

  int threads() const { return static_cast<int>(workers_.size()); }
  // Tasks of `key` submitted and not finished (running included). Tests, diagnostics.
  int Pending(const void* key) const ABSL_LOCKS_EXCLUDED(mu_);

  // Default worker count: the cores available (at least 1); with a WAL that fdatasyncs every
  // batch (`sync_always`) 4 per core, since a worker sleeps in the group commit while its
  // batch waits for the disk and the others should keep the cores busy meanwhile.
  static int DefaultThreads(bool sync_always);

 private:
  struct Queue {
    std::deque<std::pair<std::shared_ptr<void>, Task>> tasks;
    bool running = false;  // a worker runs its head; the key is not in ready_
  };
  void Work(int nice) ABSL_LOCKS_EXCLUDED(mu_);

  // A leaf lock: tasks run without it, and nothing else is taken under it.
  mutable absl::Mutex mu_;
  absl::CondVar cv_;                                          // ready_ gained a key, or stop_
  std::map<const void*, Queue> queues_ ABSL_GUARDED_BY(mu_);  // keys with work only
  std::deque<const void*> ready_ ABSL_GUARDED_BY(mu_);        // keys with tasks and none running
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace cmestream::service
