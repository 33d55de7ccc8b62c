#include "service/engine/helper_pool.h"

#include <algorithm>

#include "service/engine/thread_name.h"

namespace cmestream::service {

HelperPool::HelperPool(int threads) {
  threads = std::max(1, threads);
  workers_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i)
    workers_.emplace_back([this] {
      NameThisThread("cme-helper");
      Work();
    });
}

HelperPool::~HelperPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

int HelperPool::DefaultThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores - 1);
}

void HelperPool::Offer(SideLane& lane) {
  // At most one entry a lane: a lane already waiting will run its new jobs too.
  if (!lane.MarkOffered()) return;
  {
    absl::MutexLock lock(&mu_);
    offered_.push_back(lane.shared_from_this());
  }
  cv_.Signal();
}

void HelperPool::Work() {
  for (;;) {
    std::shared_ptr<SideLane> lane;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && offered_.empty()) cv_.Wait(&mu_);
      if (stop_) return;
      lane = std::move(offered_.front());
      offered_.pop_front();
    }
    // Cleared before running, so a job pushed from now on offers the lane again.
    lane->ClearOffered();
    lane->RunPending();
  }
}

}  // namespace cmestream::service
