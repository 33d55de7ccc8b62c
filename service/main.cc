// cmestreamd: parse flags, start the daemon, print the listening line, wait for SIGTERM/SIGINT,
// shut down cleanly and exit 0.
#include <unistd.h>

#include <csignal>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cmestream_version.h"
#include "service/daemon.h"
#include "service/flags.h"

#if defined(__x86_64__) && defined(__AVX2__)
namespace {
// Built for x86-64-v3 or wider (CMESTREAM_ARCH, the default): on an older CPU a clear message
// instead of an illegal-instruction crash. A constructor of the highest priority, compiled for
// the baseline ISA and using only write/_exit, so it runs before any other initializer of this
// binary could execute an AVX2 instruction.
__attribute__((constructor(101), target("arch=x86-64"))) void RequireAvx2() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return;
  static const char kMessage[] =
      "cmestreamd: this build needs a CPU with AVX2 and FMA (built for x86-64-v3 or wider); rebuild with "
      "-DCMESTREAM_ARCH=x86-64-v2 for this machine\n";
  (void)!write(2, kMessage, sizeof kMessage - 1);
  _exit(2);
}
}  // namespace
#endif

namespace {
// Testing knob, not a flag (service/README.md "Eigen's cache sizes"): CMESTREAM_EIGEN_CACHE_SIZES
// = "L1,L2,L3" in bytes (a K or M suffix multiplies by 1024 or 1024^2) replaces the cache sizes
// Eigen reads from cpuid. Eigen sizes a matrix product's blocks from them, so the order of its
// sums, and the last bits of the numbers, follow the processor; this lets one machine show what
// another processor's cache sizes do (tests/integration/test_view_replies_golden.py). Returns
// false, with a message, on a malformed value. Called before any thread or product runs.
bool ApplyEigenCacheSizesFromEnvironment() {
  const char* text = std::getenv("CMESTREAM_EIGEN_CACHE_SIZES");
  if (text == nullptr || *text == '\0') return true;
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  std::ptrdiff_t sizes[3] = {0, 0, 0};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    std::string part = parts[i];
    int64_t unit = 1;
    if (!part.empty() && (part.back() == 'K' || part.back() == 'k')) unit = 1024;
    if (!part.empty() && (part.back() == 'M' || part.back() == 'm')) unit = 1024 * 1024;
    if (unit != 1) part.pop_back();
    int64_t value = 0;
    ok = absl::SimpleAtoi(part, &value) && value > 0 && value <= (int64_t{1} << 40) / unit;
    sizes[i] = static_cast<std::ptrdiff_t>(value * unit);
  }
  if (!ok) {
    std::cerr << "cmestreamd: CMESTREAM_EIGEN_CACHE_SIZES must be L1,L2,L3 (bytes, K or M suffix), got '" << text
              << "'\n";
    return false;
  }
  std::cerr << "cmestreamd: CMESTREAM_EIGEN_CACHE_SIZES (testing only): Eigen's cache sizes l1=" << sizes[0]
            << " l2=" << sizes[1] << " l3=" << sizes[2]
            << " bytes instead of the processor's l1=" << Eigen::l1CacheSize() << " l2=" << Eigen::l2CacheSize()
            << " l3=" << Eigen::l3CacheSize() << "\n";
  Eigen::setCpuCacheSizes(sizes[0], sizes[1], sizes[2]);
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  using cmestream::service::Daemon;
  // Debian's Abseil is built with its mutex deadlock detection on (absl's debug default): a
  // graph of every mutex held while locking another, updated on each such lock (2.6 % of a
  // 10,000-model fleet's CPU in perf; 1,000 models: 21.2 / 21.7 -> 20.9 / 21.2 us of daemon CPU
  // a pair, docs/benchmarks.md). The lock order is checked statically (-Wthread-safety) and by
  // the sanitizer build's tests; the daemon runs as a release build of Abseil would.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<cmestream::service::ParsedFlags> flags =
      cmestream::service::ParseFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    std::cerr << "cmestreamd: " << flags.status().message() << "\n" << cmestream::service::kUsage;
    return 2;
  }
  if (flags->version) {
    std::cout << "cmestreamd " << CMESTREAM_VERSION_STRING << "\n";
    return 0;
  }
  if (flags->help) {
    std::cout << cmestream::service::kUsage;
    return 0;
  }
  if (!ApplyEigenCacheSizesFromEnvironment()) return 2;
  // Block the signals in every thread (gRPC's and the exposer's threads inherit this mask);
  // this thread then takes them synchronously with sigwait: no async-signal-safety concerns.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(flags->options);
  if (!daemon.ok()) {
    std::cerr << "cmestreamd: " << daemon.status().message() << "\n";
    return 1;
  }
  std::cout << (*daemon)->ListeningLine() << std::endl;  // endl flushes: scripts wait for it

  int received = 0;
  sigwait(&signals, &received);
  std::cerr << "cmestreamd: received " << (received == SIGTERM ? "SIGTERM" : "SIGINT") << ", shutting down\n";
  (*daemon)->Shutdown();
  return 0;
}
