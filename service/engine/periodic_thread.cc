#include "service/engine/periodic_thread.h"

#include <utility>

#include "service/engine/thread_name.h"

namespace cmestream::service {

PeriodicThread::PeriodicThread(absl::Duration period, std::function<void()> task, const char* name)
    : period_(period), task_(std::move(task)), name_(name) {}

void PeriodicThread::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] {
    NameThisThread(name_.c_str());
    Run();
  });
}

void PeriodicThread::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
  cv_.Signal();
}

void PeriodicThread::Stop() {
  std::thread running;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.Signal();
    running = std::move(thread_);
  }
  if (running.joinable()) running.join();
}

void PeriodicThread::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // A CondVar loop, not Mutex::AwaitWithTimeout: the sanitizer build can annotate only
      // CondVar waits (tests/sanitize/absl_mutex_tsan.cc).
      const absl::Time until = absl::Now() + period_;
      while (!stopping_ && !wake_) {
        if (cv_.WaitWithDeadline(&mu_, until)) break;  // the period elapsed
      }
      if (stopping_) return;
      wake_ = false;
    }
    task_();
  }
}

}  // namespace cmestream::service
