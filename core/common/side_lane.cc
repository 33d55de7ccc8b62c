#include "core/common/side_lane.h"

namespace cmestream {

int64_t SideLane::Push(SideExecutor* executor, Fn fn, void* context, void* object, int64_t a, int64_t b) {
  int64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    // A full ring: the oldest job must finish first (run it here if no helper has the lane).
    if (pushed_ - finished_ == kCapacity) WaitForLocked(finished_ + 1);
    ring_[static_cast<size_t>(pushed_ % kCapacity)] = Job{fn, context, object, a, b};
    ticket = ++pushed_;
  }
  if (executor != nullptr) {
    executor->Offer(*this);
  } else {
    WaitFor(ticket);
  }
  return ticket;
}

void SideLane::WaitFor(int64_t ticket) {
  absl::MutexLock lock(&mu_);
  WaitForLocked(ticket);
}

void SideLane::WaitForLocked(int64_t ticket) {
  while (finished_ < ticket) {
    if (!running_) {
      // No helper holds the lane: the owner runs what is left up to its ticket.
      running_ = true;
      Drain(ticket, /*helper=*/false);
    } else {
      done_.Wait(&mu_);
    }
  }
}

void SideLane::WaitAll() {
  absl::MutexLock lock(&mu_);
  WaitForLocked(pushed_);
}

bool SideLane::Idle() const {
  absl::MutexLock lock(&mu_);
  return finished_ == pushed_;
}

void SideLane::RunPending() {
  absl::MutexLock lock(&mu_);
  if (running_ || finished_ == pushed_) return;
  running_ = true;
  Drain(INT64_MAX, /*helper=*/true);
}

void SideLane::Drain(int64_t ticket, bool helper) {
  // Jobs run in ticket order with mu_ released, one thread at a time (running_).
  while (finished_ < pushed_ && finished_ < ticket) {
    const Job job = ring_[static_cast<size_t>(finished_ % kCapacity)];
    mu_.Unlock();
    job.fn(job.context, job.object, job.a, job.b);
    mu_.Lock();
    ++finished_;
    ++(helper ? on_helper_ : on_owner_);
    done_.SignalAll();
  }
  running_ = false;
  done_.SignalAll();
}

int64_t SideLane::ran_on_helper() const {
  absl::MutexLock lock(&mu_);
  return on_helper_;
}

int64_t SideLane::ran_on_owner() const {
  absl::MutexLock lock(&mu_);
  return on_owner_;
}

}  // namespace cmestream
