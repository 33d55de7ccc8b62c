#include "service/engine/ingest_pool.h"

#include <algorithm>
#include <cerrno>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "service/engine/thread_name.h"

namespace cmestream::service {

IngestPool::IngestPool(int threads, int nice) {
  threads = std::max(1, threads);
  workers_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i)
    workers_.emplace_back([this, nice] {
      NameThisThread("cme-ingest");
      Work(nice);
    });
}

IngestPool::~IngestPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

int IngestPool::DefaultThreads(bool sync_always) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return sync_always ? 4 * cores : cores;
}

void IngestPool::Submit(const void* key, std::shared_ptr<void> keep_alive, Task task) {
  {
    absl::MutexLock lock(&mu_);
    Queue& q = queues_[key];
    q.tasks.emplace_back(std::move(keep_alive), std::move(task));
    // Ready iff it was idle: a running key re-enters ready_ when its task ends.
    if (!q.running && q.tasks.size() == 1) ready_.push_back(key);
  }
  cv_.Signal();
}

int IngestPool::Pending(const void* key) const {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(key);
  if (it == queues_.end()) return 0;
  return static_cast<int>(it->second.tasks.size()) + (it->second.running ? 1 : 0);
}

void IngestPool::Work(int nice) {
#ifdef __linux__
  // Per-thread nice: on Linux PRIO_PROCESS with a thread id changes only that thread. Relative
  // to the thread's current value (inherited from the daemon), so a daemon started under
  // `nice` keeps its offset. Failure (e.g. a seccomp filter) leaves the default priority.
  if (nice > 0) {
    const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno == 0) (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, current + nice));
  }
#else
  (void)nice;
#endif
  mu_.Lock();
  for (;;) {
    while (!stop_ && ready_.empty()) cv_.Wait(&mu_);
    if (ready_.empty()) break;  // stop_ and every submitted task ran (the destructor's promise)
    const void* key = ready_.front();
    ready_.pop_front();
    Queue& q = queues_[key];
    auto item = std::move(q.tasks.front());
    q.tasks.pop_front();
    q.running = true;
    mu_.Unlock();
    item.second();
    item = {};  // drop the task and its keep-alive outside the lock
    mu_.Lock();
    Queue& after = queues_[key];  // map nodes are stable, but look it up again for clarity
    after.running = false;
    if (after.tasks.empty()) {
      queues_.erase(key);
    } else {
      ready_.push_back(key);  // round robin: the other ready keys go first
      cv_.Signal();
    }
  }
  mu_.Unlock();
}

}  // namespace cmestream::service
