// Delay embedding (core/stream/delay_embedding.h, docs/algorithms.md §1.14): windows against
// their definition, episodes across batches, gaps and keys, serialization mid-window; and the
// StreamingLearner with delays, whose estimators must hold, bit for bit, what a learner without
// delays holds when fed the same windows by hand.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/io/binary_io.h"
#include "core/stream/delay_embedding.h"
#include "core/stream/streaming_learner.h"
#include "gtest/gtest.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

// Row r of a C-channel test series: value(r, c) = 100 r + c (every value names its row).
std::vector<double> Rows(int64_t first, int64_t n, int c) {
  std::vector<double> v;
  for (int64_t r = first; r < first + n; ++r)
    for (int j = 0; j < c; ++j) v.push_back(100.0 * r + j);
  return v;
}

TEST(DelayEmbedding, WindowsAreTheDefinition) {
  const DelayEmbedding::Options o{2, 3, 2};  // C = 2, D = 3, S = 2: w_t = [x_{t-4}, x_{t-2}, x_t]
  EXPECT_EQ(o.span(), 5);
  EXPECT_EQ(o.window_dim(), 6);
  const std::vector<double> rows = Rows(0, 9, 2);
  std::vector<double> out(9 * 6, -1.0);
  ASSERT_EQ(DelayEmbedding::WindowsOf(o, rows.data(), 9, out.data()), 5);
  for (int i = 0; i < 5; ++i) {
    const int t = i + 4;  // window i ends at row t
    const double expected[6] = {100.0 * (t - 4),     100.0 * (t - 4) + 1, 100.0 * (t - 2),
                                100.0 * (t - 2) + 1, 100.0 * t,           100.0 * t + 1};
    for (int k = 0; k < 6; ++k) EXPECT_EQ(out[i * 6 + k], expected[k]) << i << " " << k;
  }
  EXPECT_EQ(DelayEmbedding::NumWindows(o, 4), 0);
  EXPECT_EQ(DelayEmbedding::NumWindows(o, 5), 1);
}

TEST(DelayEmbedding, BatchesThatRepeatTheirFirstRowContinueTheEpisode) {
  const DelayEmbedding::Options o{2, 3, 2};
  const std::vector<double> all = Rows(0, 20, 2);
  std::vector<double> expected(20 * 6);
  const int64_t n_expected = DelayEmbedding::WindowsOf(o, all.data(), 20, expected.data());
  // Batches of rows 0..3, 3..6, 6..12, 12..19 (each repeats the previous batch's last row).
  DelayEmbedding e(o);
  std::vector<double> got, windows;
  const int cuts[][2] = {{0, 4}, {3, 4}, {6, 7}, {12, 8}};
  for (int b = 0; b < 4; ++b) {
    const std::vector<double> rows = Rows(cuts[b][0], cuts[b][1], 2);
    bool started = false;
    const int64_t n = e.Append(rows.data(), cuts[b][1], "p", "", false, windows, &started);
    EXPECT_EQ(started, b <= 1) << b;  // batch 1 completes the episode's first window
    // A continuing batch's first window (once there is one) is the previous batch's last.
    const int64_t skip = (b > 0 && got.size() > 0) ? 1 : 0;
    if (skip) {
      EXPECT_EQ(0, std::memcmp(windows.data(), got.data() + got.size() - 6, 6 * sizeof(double))) << b;
    }
    got.insert(got.end(), windows.begin() + skip * 6, windows.begin() + n * 6);
  }
  ASSERT_EQ(static_cast<int64_t>(got.size()), n_expected * 6);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << i;
}

TEST(DelayEmbedding, GapsKeysAndUnrepeatedRowsStartAnEpisode) {
  const DelayEmbedding::Options o{1, 3, 1};
  std::vector<double> windows;
  bool started = false;
  const std::vector<double> a = Rows(0, 5, 1);  // 0..4: windows end at 2, 3, 4
  DelayEmbedding e(o);
  EXPECT_EQ(e.Append(a.data(), 5, "p", "e", false, windows, &started), 3);
  const std::vector<double> b = Rows(4, 3, 1);                             // 4..6, repeats row 4
  EXPECT_EQ(e.Append(b.data(), 3, "p", "e", true, windows, &started), 1);  // a gap: 4, 5, 6 only
  EXPECT_TRUE(started);
  EXPECT_EQ(windows[0], 400.0);
  EXPECT_EQ(e.Append(Rows(6, 2, 1).data(), 2, "p", "other", false, windows, &started), 0);  // another key
  EXPECT_TRUE(started);
  EXPECT_EQ(e.Append(Rows(9, 3, 1).data(), 3, "p", "other", false, windows, &started), 1);  // row 9 != row 7
  EXPECT_TRUE(started);
  EXPECT_EQ(windows[0], 900.0);  // [9, 10, 11]: nothing of rows 6, 7
  EXPECT_EQ(e.rows_kept(), 3);
  EXPECT_EQ(e.Append(Rows(11, 2, 1).data(), 2, "p", "other", false, windows, &started), 2);  // continues: 9..12
  EXPECT_FALSE(started);
  EXPECT_EQ(windows[0], 900.0);   // the repeated row's window [9, 10, 11]
  EXPECT_EQ(windows[3], 1000.0);  // [10, 11, 12]
}

TEST(DelayEmbedding, SerializationContinuesMidWindow) {
  const DelayEmbedding::Options o{2, 4, 3};  // span 10
  DelayEmbedding a(o), b(o);
  std::vector<double> wa, wb;
  bool started = false;
  const std::vector<double> head = Rows(0, 7, 2);  // fewer rows than a window
  a.Append(head.data(), 7, "p", "e", false, wa, &started);
  b.Append(head.data(), 7, "p", "e", false, wb, &started);
  io::Writer w;
  b.Serialize(w);
  const std::string bytes = w.Release();
  io::Reader r(bytes, "test");
  DelayEmbedding restored(o);
  ASSERT_TRUE(restored.Deserialize(r).ok());
  const std::vector<double> tail = Rows(6, 12, 2);
  const int64_t na = a.Append(tail.data(), 12, "p", "e", false, wa, &started);
  const int64_t nr = restored.Append(tail.data(), 12, "p", "e", false, wb, &started);
  EXPECT_TRUE(started);  // the same episode, whose first window this batch completes
  ASSERT_EQ(na, 9);      // rows 0..17 in one episode: windows end at rows 9..17
  ASSERT_EQ(nr, na);
  EXPECT_EQ(0, std::memcmp(wa.data(), wb.data(), sizeof(double) * na * o.window_dim()));
}

constexpr int kChannels = 2, kDelays = 3, kStride = 2;

StreamingLearner::Options LearnerOptions(int dim, int delays, int stride) {
  StreamingLearner::Options o;
  o.dim = dim;
  o.cme.dim = dim;
  o.cme.sigma = 0.8;
  o.cme.max_dict = 40;
  o.seed = 3;
  o.rff_features = 16;
  o.latent = true;
  o.reservoir = 50;
  o.window = 1;
  o.lags = {1, 2};
  o.micro_batch = 8;
  o.delays = delays;
  o.delay_stride = stride;
  if (delays > 1) o.forecast_scored_dims = dim / delays;
  return o;
}

// A noisy 2-channel oscillation, n rows.
RowMatrixXd Series(int64_t n) {
  std::mt19937_64 rng(9);
  std::normal_distribution<double> z(0.0, 0.05);
  RowMatrixXd x(n, kChannels);
  for (int64_t t = 0; t < n; ++t) {
    x(t, 0) = std::sin(0.3 * t) + z(rng);
    x(t, 1) = std::cos(0.3 * t) * 0.5 + z(rng);
  }
  return x;
}

StreamBatch Trajectory(const double* rows, int64_t n_rows, int dim, bool gap = false) {
  StreamBatch b;
  b.n = n_rows - 1;
  b.dim = dim;
  b.x = rows;
  b.y = rows + dim;
  b.trajectory = true;
  b.producer = "p";
  b.gap = gap;
  return b;
}

using test_support::Bytes;

TEST(StreamingLearnerDelays, LearnsWhatAPlainLearnerLearnsFromTheWindows) {
  const RowMatrixXd x = Series(300);
  // By hand: the windows as a trajectory of C x D-vectors, for a learner without delays.
  const DelayEmbedding::Options o{kChannels, kDelays, kStride};
  RowMatrixXd windows(DelayEmbedding::NumWindows(o, x.rows()), o.window_dim());
  DelayEmbedding::WindowsOf(o, x.data(), x.rows(), windows.data());
  StreamingLearner::Options po = LearnerOptions(kChannels * kDelays, 1, 1);
  po.forecast_scored_dims = kChannels;
  StreamingLearner reference(po);
  ASSERT_TRUE(reference.Observe(Trajectory(windows.data(), windows.rows(), o.window_dim())).ok());
  // The delay learner, fed raw rows in uneven batches that repeat their first row.
  StreamingLearner delayed(LearnerOptions(kChannels * kDelays, kDelays, kStride));
  int64_t at = 0;
  for (int64_t size : {3, 1, 7, 40, 100, 148}) {
    const int64_t end = std::min<int64_t>(at + size, x.rows() - 1);
    absl::StatusOr<ObserveSummary> s = delayed.Observe(Trajectory(x.row(at).data(), end - at + 1, kChannels));
    ASSERT_TRUE(s.ok()) << s.status();
    at = end;
  }
  ASSERT_EQ(at, x.rows() - 1);
  EXPECT_EQ(delayed.samples(), reference.samples());
  EXPECT_EQ(delayed.samples(), windows.rows() - 1);
  // The estimators' bytes are the reference's: the delayed learner's state is the reference's
  // followed by its window (version 7), nothing else.
  const std::string a = Bytes(delayed), b = Bytes(reference);
  ASSERT_GT(a.size(), b.size());
  EXPECT_EQ(a.substr(0, b.size()), b);
}

TEST(StreamingLearnerDelays, RestartMidWindowContinuesBitForBit) {
  const RowMatrixXd x = Series(200);
  const StreamingLearner::Options o = LearnerOptions(kChannels * kDelays, kDelays, kStride);
  StreamingLearner straight(o), stopped(o);
  ASSERT_TRUE(straight.Observe(Trajectory(x.data(), 200, kChannels)).ok());
  ASSERT_TRUE(stopped.Observe(Trajectory(x.data(), 103, kChannels)).ok());
  const std::string bytes = Bytes(stopped);
  io::Reader r(bytes, "test");
  absl::StatusOr<StreamingLearner> restored =
      StreamingLearner::Deserialize(r, o, StreamingLearner::kStateVersion, SigmaSelection{});
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored->Observe(Trajectory(x.row(102).data(), 98, kChannels)).ok());
  EXPECT_EQ(Bytes(*restored), Bytes(straight));
  // A state written before delays existed cannot hold them.
  io::Reader old(bytes, "test");
  absl::StatusOr<StreamingLearner> v6 = StreamingLearner::Deserialize(old, o, 6, SigmaSelection{});
  EXPECT_FALSE(v6.ok());
}

TEST(StreamingLearnerDelays, AGapStartsANewEpisodeAndPairsAreRefused) {
  const RowMatrixXd x = Series(60);
  const StreamingLearner::Options o = LearnerOptions(kChannels * kDelays, kDelays, kStride);
  StreamingLearner a(o);
  ASSERT_TRUE(a.Observe(Trajectory(x.data(), 30, kChannels)).ok());
  const int64_t before = a.samples();
  // Rows 29..59 after a gap: the first (D-1)S = 4 rows only fill the window again.
  absl::StatusOr<ObserveSummary> s = a.Observe(Trajectory(x.row(29).data(), 31, kChannels, /*gap=*/true));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->episode_started);
  EXPECT_EQ(a.samples() - before, 31 - 5);  // windows end at rows 33..59: 27 windows, 26 pairs
  StreamBatch pairs;
  pairs.n = 2;
  pairs.dim = kChannels;
  pairs.x = x.data();
  pairs.y = x.data() + 2 * kChannels;
  EXPECT_EQ(a.Observe(pairs).status().code(), absl::StatusCode::kInvalidArgument);
  StreamingLearner::Options bad = o;
  bad.dim = 7;  // not a multiple of delays
  bad.cme.dim = 7;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace cmestream
