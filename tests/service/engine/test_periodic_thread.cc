// PeriodicThread: the one background loop of the refresh scheduler, the periodic snapshots and
// the WAL's interval fsync. Runs on period and on Wake, coalesces wakes, never runs after Stop.
#include "service/engine/periodic_thread.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"

namespace cmestream::service {
namespace {

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(PeriodicThread, RunsEveryPeriod) {
  std::atomic<int> runs{0};
  PeriodicThread t(absl::Milliseconds(5), [&] { ++runs; });
  t.Start();
  EXPECT_TRUE(WaitFor([&] { return runs.load() >= 3; }));
  t.Stop();
}

TEST(PeriodicThread, DoesNotRunBeforeThePeriodUnlessWoken) {
  std::atomic<int> runs{0};
  PeriodicThread t(absl::Hours(1), [&] { ++runs; });
  t.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(runs.load(), 0);
  t.Wake();
  EXPECT_TRUE(WaitFor([&] { return runs.load() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(runs.load(), 1);  // one wake, one run: the next waits for the hour
  t.Stop();
}

TEST(PeriodicThread, WakesDuringARunCoalesceIntoOneMoreRun) {
  std::atomic<int> runs{0};
  absl::Notification entered, release;
  PeriodicThread t(absl::Hours(1), [&] {
    if (++runs == 1) {
      entered.Notify();
      release.WaitForNotification();
    }
  });
  t.Start();
  t.Wake();
  entered.WaitForNotification();
  for (int i = 0; i < 10; ++i) t.Wake();
  release.Notify();
  EXPECT_TRUE(WaitFor([&] { return runs.load() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(runs.load(), 2);
  t.Stop();
}

TEST(PeriodicThread, StopWaitsForTheRunningTaskAndNothingRunsAfter) {
  std::atomic<int> runs{0};
  std::atomic<bool> in_task{false};
  absl::Notification entered;
  PeriodicThread t(absl::Milliseconds(1), [&] {
    in_task = true;
    entered.Notify();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ++runs;
    in_task = false;
  });
  t.Start();
  entered.WaitForNotification();
  t.Stop();
  EXPECT_FALSE(in_task.load());
  const int after_stop = runs.load();
  EXPECT_GE(after_stop, 1);
  t.Wake();
  t.Start();  // no restart after Stop
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(runs.load(), after_stop);
  t.Stop();  // idempotent
}

TEST(PeriodicThread, StopWithoutStartAndDestructionWhileRunning) {
  {
    PeriodicThread never_started(absl::Milliseconds(1), [] {});
  }
  std::atomic<int> runs{0};
  {
    PeriodicThread t(absl::Milliseconds(1), [&] { ++runs; });
    t.Start();
    EXPECT_TRUE(WaitFor([&] { return runs.load() >= 1; }));
  }  // the destructor stops and joins
  const int after = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(runs.load(), after);
}

}  // namespace
}  // namespace cmestream::service
