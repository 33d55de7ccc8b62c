// ThreadSanitizer annotations for Debian's (uninstrumented) absl::Mutex, linked into the
// sanitizer build only (scripts/sanitize.sh, CMESTREAM_SANITIZE).
//
// Why: Debian builds Abseil with gcc and without -fsanitize=thread, so absl::Mutex's lock and
// unlock (atomics and futexes inside libabsl_synchronization.so) are invisible to TSan: every
// ABSL_GUARDED_BY member touched by two threads would be reported as a race although the mutex
// orders the accesses. Abseil's own TSan annotations (absl/base/internal/tsan_mutex_interface.h)
// are compiled into mutex.cc only when Abseil itself is built with TSan.
//
// How: the link wraps the out-of-line entry points our code calls (-Wl,--wrap=SYMBOL, see
// cmake/sanitize.cmake) and this file tells TSan what each one does, with the
// same __tsan_mutex_* calls Abseil makes in an instrumented build: TSan then sees the
// happens-before edges and also checks the lock order (lock-order-inversion reports).
// Only calls made from our objects are wrapped (gRPC's own use of absl::Mutex is not ours to
// check and stays invisible, as the rest of gRPC).
//
// Not covered: Mutex::Await / LockWhen / Condition (absl evaluates a waiter's Condition on the
// unlocking thread, which these annotations cannot describe). The service uses CondVar::Wait
// loops instead; a new Await would show up as a race report in the sanitizer run.
//
// The mangled names carry Abseil's inline namespace (Debian 12: "debian3"); a different Abseil
// fails to link with "undefined reference to __real_..." rather than running unannotated.
#include <sanitizer/tsan_interface.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Time;

extern "C" {
// The real functions (resolved by the linker's --wrap).
void __real__ZN4absl7debian35Mutex4LockEv(Mutex* mu);
void __real__ZN4absl7debian35Mutex6UnlockEv(Mutex* mu);
bool __real__ZN4absl7debian35Mutex7TryLockEv(Mutex* mu);
void __real__ZN4absl7debian35Mutex10ReaderLockEv(Mutex* mu);
void __real__ZN4absl7debian35Mutex12ReaderUnlockEv(Mutex* mu);
void __real__ZN4absl7debian35MutexD1Ev(Mutex* mu);
void __real__ZN4absl7debian35MutexD2Ev(Mutex* mu);
void __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(CondVar* cv, Mutex* mu);
bool __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(CondVar* cv, Mutex* mu, Duration d);
bool __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(CondVar* cv, Mutex* mu, Time t);

void __wrap__ZN4absl7debian35Mutex4LockEv(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}
void __wrap__ZN4absl7debian35Mutex6UnlockEv(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}
bool __wrap__ZN4absl7debian35Mutex7TryLockEv(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}
void __wrap__ZN4absl7debian35Mutex10ReaderLockEv(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}
void __wrap__ZN4absl7debian35Mutex12ReaderUnlockEv(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}
// The inline constructor already announced the mutex (ABSL_TSAN_MUTEX_CREATE in mutex.h);
// the out-of-line destructor must retire it, or a new mutex at the same address would
// inherit its state.
void __wrap__ZN4absl7debian35MutexD1Ev(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  __real__ZN4absl7debian35MutexD1Ev(mu);
}
void __wrap__ZN4absl7debian35MutexD2Ev(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  __real__ZN4absl7debian35MutexD2Ev(mu);
}
// A wait releases the mutex and re-acquires it before returning (writer mode: the service
// never waits on a reader lock).
void __wrap__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(CondVar* cv, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}
bool __wrap__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(CondVar* cv, Mutex* mu, Duration d) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  const bool timed_out = __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(cv, mu, d);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return timed_out;
}
bool __wrap__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(CondVar* cv, Mutex* mu, Time t) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  const bool timed_out = __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(cv, mu, t);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return timed_out;
}
}  // extern "C"
