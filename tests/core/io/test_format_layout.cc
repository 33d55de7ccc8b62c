// The snapshot layout of every object is pinned: the bytes a fresh object (and a discrete model fed
// a fixed chain, whose state is integer counts) serializes to are compared with recorded sizes and
// hashes. The field lists take each field's encoding from its C++ type (core/io/field_io.h), so a
// member whose type changes (int to int64_t, say) would change the format without any serializer
// line changing; round trips cannot see that (both directions change together), this test does.
// A deliberate format change bumps the object's version and records the new figures here.
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/alarms/alarm_monitor.h"
#include "core/io/binary_io.h"
#include "core/stream/streaming_learner.h"
#include "gtest/gtest.h"
#include "tests/core/alarms/scoring_version.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

using test_support::Bytes;
using test_support::Fnv1a;

// A continuous learner with every estimator of the default daemon model on, fixed sigma (so that
// every estimator exists before the first pair), the lag statistics and the alarms. Besides the
// options and zeros, its bytes hold random features drawn from the seed by this build's
// generator, which the snapshots themselves assume (EmbeddingMoments checks two of them).
std::string FreshContinuousLearner() {
  StreamingLearner::Options o;
  o.dim = 3;
  o.cme.dim = 3;
  o.cme.sigma = 0.7;
  o.cme.max_dict = 40;
  o.seed = 5;
  o.window = 2;
  o.lags = {1, 2};
  o.alarms = true;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  return Bytes(StreamingLearner(o));
}

// A discrete model (counts, discrete predictive sums, lags) after a fixed 5-state chain: integer
// counts only, so the bytes do not depend on how the compiler contracts floating-point arithmetic.
std::string DiscreteLearnerAfterAChain() {
  StreamingLearner::Options o;
  o.num_states = 5;
  o.window = 2;
  o.lags = {1, 3};
  o.seed = 5;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  StreamingLearner l(o);
  std::vector<int64_t> ids(301);
  for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int64_t>((t * 7 + t / 11) % 5);
  StreamBatch b;
  b.n = 300;
  b.x_ids = ids.data();
  b.y_ids = ids.data() + 1;
  b.trajectory = true;
  b.producer = "p";
  EXPECT_TRUE(l.Observe(b).ok());
  return Bytes(l);
}

// An alarm monitor as each scoring version writes it (v11: every test; lower: that release's).
std::string FreshMonitor(int dim, int scoring) {
  AlarmMonitor::Options o;
  o.dim = dim;
  o.channels = dim;
  test_support::ScoreAsVersion(o, scoring);
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  return Bytes(AlarmMonitor(o));
}

struct Layout {
  const char* name;
  std::function<std::string()> bytes;
  size_t size;
  uint64_t hash;
};

TEST(FormatLayout, EveryObjectWritesTheRecordedBytes) {
  const std::vector<Layout> layouts = {
      {"continuous learner, fresh", FreshContinuousLearner, 2286038, 0xd62f6aa4bf6f869bULL},
      {"discrete learner after a chain", DiscreteLearnerAfterAChain, 12160, 0xf0200d45e37a429dULL},
      {"alarm monitor d=1 v2", [] { return FreshMonitor(1, 2); }, 863, 0x1419f7fa6adde91cULL},
      {"alarm monitor d=1 v3", [] { return FreshMonitor(1, 3); }, 1156, 0x44a9ae9fc296e14cULL},
      {"alarm monitor d=1 v4", [] { return FreshMonitor(1, 4); }, 1214, 0x432c7bf2aeea7872ULL},
      {"alarm monitor d=1 v5", [] { return FreshMonitor(1, 5); }, 1480, 0x503c72044bc366f3ULL},
      {"alarm monitor d=1 v6", [] { return FreshMonitor(1, 6); }, 1646, 0x313bbc9fcef3c376ULL},
      {"alarm monitor d=2 v7", [] { return FreshMonitor(2, 7); }, 3474, 0xfe08f3b4efb0c506ULL},
      {"alarm monitor d=16 v7", [] { return FreshMonitor(16, 7); }, 9171, 0xedf4d0cfa0c1a2c5ULL},
      {"alarm monitor d=2 v8", [] { return FreshMonitor(2, 8); }, 3552, 0x53c8b2d330554563ULL},
      {"alarm monitor d=2 v9", [] { return FreshMonitor(2, 9); }, 3911, 0x599eaacb93db2decULL},
      {"alarm monitor d=2 v10", [] { return FreshMonitor(2, 10); }, 3914, 0x21b28785115e6973ULL},
      {"alarm monitor d=2 v11", [] { return FreshMonitor(2, 11); }, 3955, 0x136ad6fffbc0738aULL},
  };
  for (const Layout& l : layouts) {
    const std::string bytes = l.bytes();
    EXPECT_EQ(bytes.size(), l.size) << l.name;
    EXPECT_EQ(Fnv1a(bytes), l.hash) << l.name << ": " << bytes.size() << " bytes, hash 0x" << std::hex << Fnv1a(bytes);
  }
}

}  // namespace
}  // namespace cmestream
