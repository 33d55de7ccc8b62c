// Observe() and ObserveBatch() must not touch the heap once capacity and scratch are sized
// (docs/algorithms.md §1; house rule: no allocation per sample). Capacity grows
// geometrically with the dictionary, so growth allocates O(log max_dict) times in a learner's
// life; the windows below Reserve() first, and one test bounds the growth allocations. This
// separate binary interposes glibc's malloc/calloc/realloc (Eigen allocates with
// std::malloc, operator new ends in malloc too) and counts calls.
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "core/cme/compressed_cme.h"
#include "core/systems/duffing.h"
#include "tests/core/counting_malloc.h"

namespace cmestream {
namespace {

void CheckNoAllocation(bool one_sided, bool averaging, double decay_samples, bool batched) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = 300;
  o.one_sided = one_sided;
  o.averaging = averaging;
  o.step_decay_samples = decay_samples;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(3000, 21);
  const long at_start = testing::AllocationCount();
  cme.Reserve(o.max_dict);
  // Warm up: the dictionary exists and the batch scratch has its size.
  cme.ObserveBatch(data.x.topRows(250), data.y.topRows(250));
  cme.ObserveBatch(data.x.middleRows(250, 250), data.y.middleRows(250, 250));
  ASSERT_GT(testing::AllocationCount(), at_start) << "the counting malloc is not in effect";
  const int64_t admitted_before = cme.counters().admitted_x + cme.counters().admitted_y;
  std::vector<int> nx(250), ny(250);
  const long before = testing::AllocationCount();
  if (batched) {
    for (int t = 500; t < 1500; t += 250) {
      cme.ObserveBatch(data.x.middleRows(t, 250), data.y.middleRows(t, 250), absl::MakeSpan(nx), absl::MakeSpan(ny));
    }
  } else {
    for (int t = 500; t < 1500; ++t) cme.Observe(data.x.row(t).data(), data.y.row(t).data());
  }
  const long allocations = testing::AllocationCount() - before;
  EXPECT_EQ(allocations, 0) << "one_sided=" << one_sided << " averaging=" << averaging << " batched=" << batched;
  // Both paths (compress and admit) were exercised inside the measured window.
  EXPECT_GT(cme.counters().admitted_x + cme.counters().admitted_y, admitted_before);
  EXPECT_GT(cme.counters().compressed, 0);
}

TEST(CompressedCmeAllocations, ObserveIsAllocationFree) {
  CheckNoAllocation(true, false, 0, false);
  CheckNoAllocation(false, false, 0, false);
  CheckNoAllocation(true, true, 1000, false);
}

TEST(CompressedCmeAllocations, ObserveBatchIsAllocationFree) {
  CheckNoAllocation(true, false, 0, true);
  CheckNoAllocation(false, false, 0, true);
  CheckNoAllocation(true, true, 1000, true);
}

// Without Reserve(), allocations happen only when the capacity doubles: a few per growth, and
// O(log max_dict) growths over the whole stream (16 -> 32 -> ... -> 300 here).
TEST(CompressedCmeAllocations, GrowthAllocatesOnlyWhenCapacityDoubles) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = 300;
  o.epsilon = 1e-4;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(4000, 23);
  const long before = testing::AllocationCount();
  for (int t = 0; t < 4000; t += 200) cme.ObserveBatch(data.x.middleRows(t, 200), data.y.middleRows(t, 200));
  const long allocations = testing::AllocationCount() - before;
  ASSERT_GT(cme.dict_x_size(), 200);
  // 6 growths (16, 32, 64, 128, 256, 300), each reallocating ~16 matrices and vectors and the
  // batch scratch (~14 buffers), plus the drift re-factorizations (a few temporaries each).
  const long budget = 6 * 40 + 20 * (cme.counters().refactorizations + 1);
  EXPECT_LE(allocations, budget) << "refactorizations=" << cme.counters().refactorizations;
  EXPECT_GT(cme.counters().samples, 3000);
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
  const long before = testing::AllocationCount();
  for (int t = 1000; t < 1500; ++t) cme.Observe(data.x.row(t).data(), data.y.row(t).data());
  EXPECT_EQ(testing::AllocationCount() - before, 0);
  cme.ObserveBatch(data.x.middleRows(1500, 250), data.y.middleRows(1500, 250));  // sizes the scratch
  const long before_batch = testing::AllocationCount();
  cme.ObserveBatch(data.x.middleRows(1750, 250), data.y.middleRows(1750, 250));
  EXPECT_EQ(testing::AllocationCount() - before_batch, 0);
  EXPECT_GT(cme.counters().forced, 900);
}

}  // namespace
}  // namespace cmestream
