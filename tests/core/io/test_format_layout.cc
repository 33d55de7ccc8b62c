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

// An alarm monitor (ALRM v12): a small state (every test), a wider one (the size test alone).
std::string FreshMonitor(int dim) {
  AlarmMonitor::Options o;
  o.dim = dim;
  o.channels = dim;
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
      {"continuous learner, fresh", FreshContinuousLearner, 2286055, 0x5cf8bf9b974f5858ULL},
      {"discrete learner after a chain", DiscreteLearnerAfterAChain, 12160, 0xf0200d45e37a429dULL},
      {"alarm monitor d=1", [] { return FreshMonitor(1); }, 2906, 0x099d41ecd9323ed5ULL},
      {"alarm monitor d=2", [] { return FreshMonitor(2); }, 3966, 0x8477207484cdf0d9ULL},
      {"alarm monitor d=16", [] { return FreshMonitor(16); }, 9188, 0xed47af8f1b921c5eULL},
  };
  for (const Layout& l : layouts) {
    const std::string bytes = l.bytes();
    EXPECT_EQ(bytes.size(), l.size) << l.name;
    EXPECT_EQ(Fnv1a(bytes), l.hash) << l.name << ": " << bytes.size() << " bytes, hash 0x" << std::hex << Fnv1a(bytes);
  }
}

}  // namespace
}  // namespace cmestream
