// Names the calling thread, so `top -H`, `ps -L`, perf and gdb show which part of the daemon
// a thread serves (the ingest pool, the helpers, the refresh scheduler, ...).
#pragma once

#ifdef __linux__
#include <pthread.h>
#endif

namespace cmestream::service {

// `name`: at most 15 bytes (Linux's limit; a longer name is ignored by the kernel).
inline void NameThisThread(const char* name) {
#ifdef __linux__
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

}  // namespace cmestream::service
