#include "tests/core/counting_malloc.h"

#include <atomic>
#include <cstddef>

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* malloc(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t s) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, s);
}
void* realloc(void* p, std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
}

namespace cmestream::testing {
long AllocationCount() { return g_allocations.load(); }
}  // namespace cmestream::testing
