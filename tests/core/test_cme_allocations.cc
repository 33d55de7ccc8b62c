// Observe() must not touch the heap (ALGORITHMS.md section 1; house rule: no allocation per
// sample). This separate binary interposes glibc's malloc/calloc/realloc (Eigen allocates with
// std::malloc, operator new ends in malloc too) and counts calls.
#include <atomic>
#include <cstddef>

#include <gtest/gtest.h>

#include "core/cme/compressed_cme.h"
#include "core/systems/duffing.h"

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

namespace cmestream {
namespace {

void CheckNoAllocation(bool one_sided, bool averaging, double decay_samples) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = 300;
  o.one_sided = one_sided;
  o.averaging = averaging;
  o.step_decay_samples = decay_samples;
  const long at_start = g_allocations.load();
  CompressedCme cme(o);
  ASSERT_GT(g_allocations.load(), at_start) << "the counting malloc is not in effect";
  const auto data = systems::SimulateDuffing(3000, 21);
  cme.ObserveBatch(data.x.topRows(500), data.y.topRows(500));  // warm up: dictionary exists
  const int64_t admitted_before = cme.counters().admitted_x + cme.counters().admitted_y;
  const long before = g_allocations.load();
  for (int t = 500; t < 1500; ++t) cme.Observe(data.x.row(t).data(), data.y.row(t).data());
  const long allocations = g_allocations.load() - before;
  EXPECT_EQ(allocations, 0) << "one_sided=" << one_sided << " averaging=" << averaging;
  // Both paths (compress and admit) were exercised inside the measured window.
  EXPECT_GT(cme.counters().admitted_x + cme.counters().admitted_y, admitted_before);
  EXPECT_GT(cme.counters().compressed, 0);
}

TEST(CompressedCmeAllocations, ObserveIsAllocationFree) {
  CheckNoAllocation(true, false, 0);
  CheckNoAllocation(false, false, 0);
  CheckNoAllocation(true, true, 1000);
}

TEST(CompressedCmeAllocations, ForcedProjectionsAtTheCapAreAllocationFree) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = 50;
  o.epsilon = 1e-5;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(2000, 22);
  cme.ObserveBatch(data.x.topRows(1000), data.y.topRows(1000));
  ASSERT_EQ(cme.dict_x_size(), 50);
  const long before = g_allocations.load();
  for (int t = 1000; t < 2000; ++t) cme.Observe(data.x.row(t).data(), data.y.row(t).data());
  EXPECT_EQ(g_allocations.load() - before, 0);
  EXPECT_GT(cme.counters().forced, 900);
}

}  // namespace
}  // namespace cmestream
