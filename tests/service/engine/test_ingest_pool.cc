// IngestPool's per-thread priority (--ingest-nice): the workers run at the daemon's nice plus
// the offset, every other thread keeps its own; out-of-range values are refused by the flag check.
#include "service/engine/ingest_pool.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <future>

#include <gtest/gtest.h>

#include "service/daemon.h"

namespace cmestream::service {
namespace {

int ThreadNice() {
  errno = 0;
  const int v = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  EXPECT_EQ(errno, 0);
  return v;
}

// The nice value a task of `pool` observes on its worker thread.
int WorkerNice(IngestPool& pool, int key) {
  std::promise<int> seen;
  pool.Submit(reinterpret_cast<const void*>(static_cast<intptr_t>(key)), nullptr,
              [&] { seen.set_value(ThreadNice()); });
  return seen.get_future().get();
}

TEST(IngestPool, WorkersLowerOnlyTheirOwnPriority) {
  const int base = ThreadNice();
  {
    IngestPool plain(2);
    EXPECT_EQ(WorkerNice(plain, 1), base);
    EXPECT_EQ(WorkerNice(plain, 2), base);
  }
  {
    IngestPool low(2, 7);
    for (int key = 1; key <= 4; ++key) EXPECT_EQ(WorkerNice(low, key), std::min(19, base + 7)) << key;
    EXPECT_EQ(ThreadNice(), base) << "the submitting thread must keep its priority";
  }
  {
    IngestPool clamped(1, 19);
    EXPECT_EQ(WorkerNice(clamped, 1), 19);
  }
  EXPECT_EQ(ThreadNice(), base);
}

TEST(IngestPool, IngestNiceFlagIsRangeChecked) {
  DaemonOptions o;
  o.ingest_nice = 20;
  absl::Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--ingest-nice is 20, expected 0..19"), std::string::npos) << s.message();
  o.ingest_nice = -1;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o.ingest_nice = 10;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
}

}  // namespace
}  // namespace cmestream::service
