// cmestreamd: parse flags, start the daemon, print the listening line, wait for SIGTERM/SIGINT,
// shut down cleanly and exit 0.
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

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

int main(int argc, char** argv) {
  using cmestream::service::Daemon;
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
