// SideLane (core/common/side_lane.h) and the learner on two threads
// (StreamingLearner::SetSideExecutor, docs/algorithms.md §9.3).
//
// The lane: jobs run once each, in push order, on a helper or on the owner, and a waiting owner
// runs them itself when no helper comes. The learner: with a helper thread its serialized state
// and every batch summary equal, byte for byte, those of the learner on one thread, for every
// kind of model whose work it splits (trajectories with lags, latent and predictive
// accumulators, unordered pairs, the sigma warm-up ending mid-batch and by EndWarmup, delays,
// scaling, a reduction, alarms, alarms that reset), and the helper really ran jobs. The CME's
// own lane (its runs' y side) gives the state of the CME without it.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/cme/compressed_cme.h"
#include "core/common/side_lane.h"
#include "core/io/binary_io.h"
#include "core/stream/streaming_learner.h"
#include "gtest/gtest.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

// One helper thread, as the daemon's HelperPool (service/engine/helper_pool.h) with one thread.
class OneHelper final : public SideExecutor {
 public:
  OneHelper() : thread_([this] { Work(); }) {}
  ~OneHelper() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Offer(SideLane& lane) override {
    if (!lane.MarkOffered()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      offered_.push_back(lane.shared_from_this());
      lanes_.push_back(lane.shared_from_this());
    }
    cv_.notify_one();
  }
  // Jobs the helper ran, over every lane it was offered.
  int64_t ran() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (const auto& l : lanes_) n += l->ran_on_helper();
    return n;
  }

 private:
  void Work() {
    for (;;) {
      std::shared_ptr<SideLane> lane;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !offered_.empty(); });
        if (stop_) return;
        lane = offered_.front();
        offered_.pop_front();
      }
      lane->ClearOffered();
      lane->RunPending();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<SideLane>> offered_;
  std::vector<std::shared_ptr<SideLane>> lanes_;
  bool stop_ = false;
  std::thread thread_;
};

// Appends b to the context's vector (a job that records its order).
void Record(void* context, void*, int64_t a, int64_t b) {
  static_cast<std::vector<int64_t>*>(context)->push_back(a * 1000 + b);
}

TEST(SideLane, WithoutAnExecutorPushRunsTheJobAtOnce) {
  auto lane = std::make_shared<SideLane>();
  std::vector<int64_t> seen;
  EXPECT_EQ(lane->Push(nullptr, &Record, &seen, nullptr, 1, 2), 1);
  EXPECT_EQ(seen, std::vector<int64_t>({1002}));
  EXPECT_TRUE(lane->Idle());
  EXPECT_EQ(lane->ran_on_owner(), 1);
}

TEST(SideLane, JobsRunOnceInPushOrderWhoeverRunsThem) {
  OneHelper helper;
  auto lane = std::make_shared<SideLane>();
  std::vector<int64_t> seen;
  // More jobs than the ring holds, pushed with waits in between: the owner and the helper both
  // take turns, and the full ring makes Push wait for (or run) the oldest.
  const int jobs = 3 * SideLane::kCapacity + 5;
  std::vector<int64_t> want;
  for (int i = 0; i < jobs; ++i) {
    lane->Push(&helper, &Record, &seen, nullptr, i, 7);
    want.push_back(i * 1000 + 7);
    if (i % 50 == 49) lane->WaitFor(i - 10);
  }
  lane->WaitAll();
  EXPECT_TRUE(lane->Idle());
  EXPECT_EQ(seen, want);
  EXPECT_EQ(lane->ran_on_owner() + lane->ran_on_helper(), jobs);
}

// An executor that never runs anything: the owner must run every job when it waits.
class Declines final : public SideExecutor {
 public:
  void Offer(SideLane&) override {}
};

TEST(SideLane, AnOwnerRunsTheJobsNoHelperTook) {
  Declines none;
  auto lane = std::make_shared<SideLane>();
  std::vector<int64_t> seen;
  for (int i = 0; i < 5; ++i) lane->Push(&none, &Record, &seen, nullptr, i, 0);
  EXPECT_TRUE(seen.empty());  // nothing ran yet
  lane->WaitFor(2);
  EXPECT_EQ(seen.size(), 2u);
  lane->WaitAll();
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(lane->ran_on_owner(), 5);
  EXPECT_EQ(lane->ran_on_helper(), 0);
}

// ---- The learner on two threads --------------------------------------------------------------

// States 0..n of a 3-channel chain with a slow rotation in its first two channels and channels
// on scales 1 and 40, plus a jump in its noise level at `change` (so alarms fire).
RowMatrixXd Chain(int64_t n, uint64_t seed, int64_t change) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  RowMatrixXd s(n + 1, 3);
  s.row(0).setZero();
  for (int64_t t = 0; t < n; ++t) {
    const double level = t < change ? 0.3 : 1.2;
    s(t + 1, 0) = 0.8 * s(t, 0) - 0.4 * s(t, 1) + level * noise(rng);
    s(t + 1, 1) = 0.4 * s(t, 0) + 0.8 * s(t, 1) + level * noise(rng);
    s(t + 1, 2) = 0.9 * s(t, 2) + 40 * level * noise(rng);
  }
  return s;
}

StreamingLearner::Options Base() {
  StreamingLearner::Options o;
  o.dim = 3;
  o.cme.dim = 3;
  o.cme.sigma = 0;  // auto
  o.cme.max_dict = 80;
  o.auto_sigma_warmup = 120;
  o.seed = 5;
  o.rff_features = 24;
  o.micro_batch = 32;
  o.latent = true;
  o.reservoir = 150;
  o.window = 2;
  o.lags = {1, 4};
  o.alarms = true;
  o.scale_inputs = true;
  return o;
}

using test_support::Bytes;

std::string SummaryText(const ObserveSummary& s) {
  return std::to_string(s.pairs) + " " + std::to_string(s.states) + " " + std::to_string(s.admitted_x) + " " +
         std::to_string(s.admitted_y) + " " + std::to_string(s.forced) + " " + std::to_string(s.spectral_epochs) + " " +
         std::to_string(s.lag_rebases) + " " + std::to_string(s.forecast_refits) + " " + std::to_string(s.resets) +
         " " + std::to_string(s.warmup_finished) + " " + std::to_string(s.pending_warmup) + " " +
         std::to_string(s.episode_started);
}

// Feeds s (rows as raw rows with delays, else states) in batches of `size` (trajectories) or
// as unordered pairs; `end_warmup_at` > 0 ends the warm-up by EndWarmup after that many pairs.
// Returns every batch summary; the learner's bytes in *bytes.
std::vector<std::string> Learn(const StreamingLearner::Options& o, SideExecutor* executor, const RowMatrixXd& s,
                               int64_t size, bool pairs, int64_t end_warmup_at, std::string* bytes) {
  StreamingLearner l(o);
  l.SetSideExecutor(executor);
  std::vector<std::string> summaries;
  const int64_t n = s.rows() - 1;
  RowMatrixXd x = s.topRows(n), y = s.bottomRows(n);
  bool ended = false;
  for (int64_t f = 0; f < n; f += size) {
    StreamBatch b;
    b.n = std::min<int64_t>(size, n - f);
    b.dim = static_cast<int>(s.cols());
    if (pairs) {
      b.x = x.row(f).data();
      b.y = y.row(f).data();
    } else {
      b.x = s.row(f).data();
      b.y = s.row(f + 1).data();
      b.trajectory = true;
      b.producer = "p";
    }
    b.time = 1000.0 + static_cast<double>(f);
    absl::StatusOr<ObserveSummary> r = l.Observe(b);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) summaries.push_back(SummaryText(*r));
    if (end_warmup_at > 0 && !ended && f + b.n >= end_warmup_at && !l.ready()) {
      EXPECT_TRUE(l.EndWarmup().ok());
      ended = true;
    }
  }
  *bytes = Bytes(l);
  return summaries;
}

struct Case {
  std::string name;
  StreamingLearner::Options options;
  int64_t batch = 97;
  bool pairs = false;
  int64_t end_warmup_at = 0;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"trajectory, every estimator, alarms", Base()});
  Case small = {"batches smaller than a run", Base(), 5};
  cases.push_back(small);
  Case pairs = {"unordered pairs (lag 1)", Base(), 64, true};
  pairs.options.latent = false;
  pairs.options.window = 0;
  cases.push_back(pairs);
  Case early = {"warm-up ended by EndWarmup", Base(), 60, false, 60};
  cases.push_back(early);
  Case fixed = {"fixed sigma, unscaled, no alarms", Base()};
  fixed.options.cme.sigma = 1.5;
  fixed.options.scale_inputs = false;
  fixed.options.alarms = false;
  cases.push_back(fixed);
  Case reset = {"alarms that reset the model", Base()};
  reset.options.reset_on_alarm = true;
  cases.push_back(reset);
  Case reduced = {"a reduction to 2 dimensions", Base()};
  reduced.options.reduce = 2;
  cases.push_back(reduced);
  Case delays = {"delays 3 on one channel", Base()};
  delays.options.dim = 3;
  delays.options.cme.dim = 3;
  delays.options.delays = 3;
  cases.push_back(delays);
  Case sequential = {"runs of one pair", Base()};
  sequential.options.micro_batch = 1;
  cases.push_back(sequential);
  return cases;
}

// The CME's own lane (CompressedCme::SetSideLane): each run's y side goes to the lane and the
// state is that of the CME without it, byte for byte, through admissions and the cap, and the
// lane really took the jobs. i.i.d. points in 4 dimensions fill the dictionary: at 60 atoms the
// products stay whole; at 300 (>= kSplitMinRows) the top rows of Z = W~_0 S and of the flush go
// to the lane too, with and without the Polyak-Ruppert mean (which the flush also splits).
void ExpectSameStateWithTheLane(int max_dict, bool averaging) {
  SCOPED_TRACE(testing::Message() << "max_dict " << max_dict << (averaging ? ", averaging" : ""));
  CompressedCme::Options o;
  o.dim = 4;
  o.sigma = max_dict > 100 ? 0.25 : 0.5;
  o.max_dict = max_dict;
  o.averaging = averaging;
  CompressedCme alone(o), split(o);
  OneHelper helper;
  auto lane = std::make_shared<SideLane>();
  split.SetSideLane(lane.get(), &helper);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  RowMatrixXd x(97, 4), y(97, 4);
  const int batches = max_dict > 100 ? 60 : 30;
  for (int batch = 0; batch < batches; ++batch) {
    for (int i = 0; i < 97; ++i) {
      for (int j = 0; j < 4; ++j) {
        x(i, j) = u(rng);
        y(i, j) = 0.8 * x(i, j) + 0.2 * u(rng);
      }
    }
    alone.ObserveBatch(x, y);
    split.ObserveBatch(x, y);
  }
  EXPECT_EQ(split.dict_x_size(), max_dict);
  // At least a run a batch; with the split three jobs a run (y side, Z's rows, the flush's).
  EXPECT_GT(lane->ran_on_helper() + lane->ran_on_owner(), max_dict > 100 ? 3 * batches : batches);
  io::Writer a, b;
  alone.Serialize(a);
  split.Serialize(b);
  EXPECT_TRUE(a.data() == b.data()) << "the serialized states differ";  // (not EXPECT_EQ: megabytes)
}

TEST(CmeOnTwoThreads, TheYSideOnALaneGivesTheSameState) { ExpectSameStateWithTheLane(60, false); }

TEST(CmeOnTwoThreads, RowsSplitAcrossTheLaneGiveTheSameState) {
  ASSERT_GE(300, CompressedCme::kSplitMinRows);
  ExpectSameStateWithTheLane(300, false);
  ExpectSameStateWithTheLane(300, true);
}

// The split point: none below kSplitMinRows, else a multiple of 24 near the middle.
TEST(CmeOnTwoThreads, TheSplitRowIsAMultipleOf24NearTheMiddle) {
  EXPECT_EQ(CompressedCme::SplitRow(CompressedCme::kSplitMinRows - 1), 0);
  for (int rows = CompressedCme::kSplitMinRows; rows <= 2000; ++rows) {
    const int b = CompressedCme::SplitRow(rows);
    ASSERT_EQ(b % 24, 0) << rows;
    ASSERT_GT(b, 0) << rows;
    ASSERT_LE(b, rows / 2) << rows;
    ASSERT_GT(b, rows / 2 - 24) << rows;
  }
}

TEST(StreamingLearnerOnTwoThreads, StateAndSummariesEqualTheOneThreadLearner) {
  const RowMatrixXd chain = Chain(1400, 9, 900);
  OneHelper helper;
  int helped = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.options.Validate().ok()) << c.options.Validate();
    // A delay model reads raw rows of input_dim() values: its first channel.
    const RowMatrixXd s = c.options.delays > 1 ? RowMatrixXd(chain.leftCols(1)) : chain;
    std::string one, two;
    const int64_t before = helper.ran();
    const std::vector<std::string> want = Learn(c.options, nullptr, s, c.batch, c.pairs, c.end_warmup_at, &one);
    const std::vector<std::string> got = Learn(c.options, &helper, s, c.batch, c.pairs, c.end_warmup_at, &two);
    EXPECT_EQ(got, want);
    EXPECT_TRUE(one == two) << "the serialized states differ (" << one.size() << " and " << two.size() << " bytes)";
    helped += helper.ran() - before > 0 ? 1 : 0;
  }
  // The helper took part. Whether it gets to a given model's jobs before their owner waits for
  // them depends on the scheduler (on a loaded machine the owner may run them all), so this
  // counts the models it helped: nine of nine on an idle machine.
  EXPECT_GT(helped, 0);
}

// A batch that alarms: the alarms on the lane raise the same alarms at the same pairs.
TEST(StreamingLearnerOnTwoThreads, AlarmsAreTheSameOnTheLane) {
  const RowMatrixXd s = Chain(1400, 9, 900);
  OneHelper helper;
  StreamingLearner one(Base()), two(Base());
  two.SetSideExecutor(&helper);
  for (StreamingLearner* l : {&one, &two}) {
    for (int64_t f = 0; f < 1400; f += 200) {
      StreamBatch b;
      b.n = std::min<int64_t>(200, 1400 - f);
      b.dim = 3;
      b.x = s.row(f).data();
      b.y = s.row(f + 1).data();
      b.trajectory = true;
      b.time = static_cast<double>(f);
      ASSERT_TRUE(l->Observe(b).ok());
    }
  }
  ASSERT_NE(one.alarms(), nullptr);
  EXPECT_GT(one.alarms()->alarms_total(), 0) << "the noise jump at pair 900 should alarm";
  EXPECT_EQ(two.alarms()->alarms_total(), one.alarms()->alarms_total());
  EXPECT_EQ(Bytes(two), Bytes(one));
}

}  // namespace
}  // namespace cmestream
