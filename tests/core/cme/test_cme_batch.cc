// ObserveBatch (exact micro-batching, docs/algorithms.md §9) against the sequential recursion
// Observe() on fixed streams: the same admissions (atoms and counters identical), the same
// nearest atoms per pair, W within 1e-10 relative. Variants cover what changes the batched
// algebra: decaying step, Polyak-Ruppert averaging, the dictionary cap binding (forced steps),
// paired admission, drift checks inside a batch, uneven batch boundaries.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "core/cme/compressed_cme.h"
#include "core/systems/duffing.h"
#include "core/systems/four_well.h"

namespace cmestream {
namespace {

struct Case {
  const char* name;
  bool four_well;  // else Duffing
  int n;
  bool averaging;
  double decay_samples;  // 0 = constant step
  int max_dict;
  bool one_sided;
  double epsilon;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

CompressedCme::Options OptionsFor(const Case& c) {
  CompressedCme::Options o;
  o.dim = c.four_well ? 1 : 2;
  o.sigma = c.four_well ? 0.3 : 0.4;
  o.eta = 0.1;
  o.lambda = 1e-3;
  o.epsilon = c.epsilon;
  o.max_dict = c.max_dict;
  o.one_sided = c.one_sided;
  o.averaging = c.averaging;
  o.step_decay_samples = c.decay_samples;
  o.step_decay_power = 0.75;
  o.drift_check_interval = 500;  // several checks (and re-factorizations) inside the streams
  return o;
}

double RelativeDifference(const MatrixXd& a, const MatrixXd& b) { return (a - b).norm() / std::max(a.norm(), 1e-300); }

class CmeBatchEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(CmeBatchEquivalence, BatchedEqualsSequential) {
  const Case& c = GetParam();
  const systems::Transitions data = c.four_well ? systems::SimulateFourWell(c.n, 5) : systems::SimulateDuffing(c.n, 9);
  const CompressedCme::Options o = OptionsFor(c);

  CompressedCme seq(o);
  std::vector<int> seq_nx(c.n), seq_ny(c.n);
  for (int t = 0; t < c.n; ++t) {
    seq.Observe(data.x.row(t).data(), data.y.row(t).data());
    seq_nx[t] = seq.last_nearest_x();
    seq_ny[t] = seq.last_nearest_y_in_x();
  }
  ASSERT_GT(seq.dict_x_size(), 10);
  if (c.max_dict < 100) {
    ASSERT_GT(seq.counters().forced, 100) << "the cap must bind in this case";
  }
  ASSERT_GT(seq.last_drift(), 0) << "drift checks must have run inside the stream";

  // Uneven batch boundaries, including single pairs and batches longer than a run.
  for (int batch : {1, 7, 256, 100000}) {
    CompressedCme bat(o);
    std::vector<int> nx(c.n, -7), ny(c.n, -7);
    for (int t = 0; t < c.n; t += batch) {
      const int len = std::min(batch, c.n - t);
      bat.ObserveBatch(data.x.middleRows(t, len), data.y.middleRows(t, len), absl::MakeSpan(nx).subspan(t, len),
                       absl::MakeSpan(ny).subspan(t, len));
    }
    SCOPED_TRACE(testing::Message() << "batch " << batch);
    const CompressedCme::Counters& s = seq.counters();
    const CompressedCme::Counters& b = bat.counters();
    EXPECT_EQ(b.samples, s.samples);
    EXPECT_EQ(b.compressed, s.compressed);
    EXPECT_EQ(b.admitted_x, s.admitted_x);
    EXPECT_EQ(b.admitted_y, s.admitted_y);
    EXPECT_EQ(b.forced, s.forced);
    EXPECT_EQ(b.refactorizations, s.refactorizations);
    EXPECT_NEAR(b.forced_error_sum, s.forced_error_sum, 1e-9 * std::max(1.0, s.forced_error_sum));
    // The admitted atoms are stream points: identical decisions give bit-identical atoms.
    ASSERT_EQ(bat.dict_x_size(), seq.dict_x_size());
    ASSERT_EQ(bat.dict_y_size(), seq.dict_y_size());
    EXPECT_EQ(RowMatrixXd(bat.x_atoms()), RowMatrixXd(seq.x_atoms()));
    EXPECT_EQ(RowMatrixXd(bat.y_atoms()), RowMatrixXd(seq.y_atoms()));
    EXPECT_LT(RelativeDifference(bat.W_iterate(), seq.W_iterate()), 1e-10);
    EXPECT_LT(RelativeDifference(bat.W(), seq.W()), 1e-10);
    EXPECT_LT(RelativeDifference(bat.gram_x_inverse(), seq.gram_x_inverse()), 1e-10);
    EXPECT_EQ(nx, seq_nx);
    EXPECT_EQ(ny, seq_ny);
    EXPECT_EQ(bat.last_nearest_x(), seq.last_nearest_x());
    EXPECT_EQ(bat.last_nearest_y_in_x(), seq.last_nearest_y_in_x());
    // err^2 contains delta = 1 - k^T G^-1 k, a cancellation (delta ~ 1e-8 next to 1): its
    // relative rounding is ~1e-16 / delta, so the compression error agrees to ~1e-6, not 1e-10.
    EXPECT_NEAR(bat.last_error(), seq.last_error(), 1e-5 * seq.last_error());
  }
}

INSTANTIATE_TEST_SUITE_P(Streams, CmeBatchEquivalence,
                         ::testing::Values(Case{"four_well_constant", true, 4000, false, 0, 1000, true, 1e-3},
                                           Case{"duffing_constant", false, 4000, false, 0, 1000, true, 1e-3},
                                           Case{"duffing_decaying_step", false, 4000, false, 500, 1000, true, 1e-3},
                                           Case{"duffing_averaging", false, 4000, true, 500, 1000, true, 1e-3},
                                           Case{"four_well_averaging", true, 4000, true, 0, 1000, true, 1e-3},
                                           Case{"duffing_cap_binds", false, 4000, false, 0, 40, true, 1e-5},
                                           Case{"duffing_cap_binds_averaging", false, 4000, true, 300, 40, true, 1e-5},
                                           Case{"duffing_paired", false, 4000, false, 0, 1000, false, 1e-3}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// Feeding one stream through ObserveBatch in the same batches gives bit-identical learners
// (what WAL replay relies on), and a snapshot between batches continues bit-identically.
TEST(CmeBatch, SameBatchesAreBitIdentical) {
  const auto data = systems::SimulateDuffing(3000, 4);
  CompressedCme::Options o;
  o.dim = 2;
  o.averaging = true;
  CompressedCme a(o), b(o);
  for (int t = 0; t < 3000; t += 300) {
    a.ObserveBatch(data.x.middleRows(t, 300), data.y.middleRows(t, 300));
    b.ObserveBatch(data.x.middleRows(t, 300), data.y.middleRows(t, 300));
  }
  EXPECT_EQ(MatrixXd(a.W()), MatrixXd(b.W()));
  EXPECT_EQ(MatrixXd(a.gram_y_inverse()), MatrixXd(b.gram_y_inverse()));
}

// On a trajectory (x_{t+1} = y_t) the kernel column k_X(x_{t+1}) is copied from k_X(y_t), in
// Observe and inside ObserveBatch's runs. The reference recomputes every column: the same
// stream with each x's constant third coordinate written as -0.0 (equal in value, so equal
// kernel values, but not bitwise the previous y, so never copied). Every factor, the counters
// and the nearest atoms must come out equal (== ignores only the sign of those zeros).
TEST(CmeBatch, TrajectoryKernelColumnsAreCopiedWithTheSameValues) {
  const int n = 2400;
  const auto data = systems::SimulateDuffing(n, 6);
  RowMatrixXd s(n + 1, 3);
  s.row(0) << data.x(0, 0), data.x(0, 1), 0.0;
  for (int t = 0; t < n; ++t)
    s.row(t + 1) << 0.9 * s(t, 0) + 0.1 * data.y(t, 0), 0.9 * s(t, 1) + 0.1 * data.y(t, 1), 0.0;
  const RowMatrixXd y = s.bottomRows(n);
  const RowMatrixXd x = s.topRows(n);
  RowMatrixXd x_neg = x;
  x_neg.col(2).setConstant(-0.0);
  CompressedCme::Options o;
  o.dim = 3;
  o.sigma = 0.3;
  o.averaging = true;
  o.drift_check_interval = 300;
  for (bool batched : {false, true}) {
    SCOPED_TRACE(batched ? "ObserveBatch" : "Observe");
    CompressedCme reuse(o), fresh(o);
    std::vector<int> nx(n), ny(n), fx(n), fy(n);
    for (int t = 0; t < n; t += 256) {
      const int b = std::min(256, n - t);
      if (batched) {
        reuse.ObserveBatch(x.middleRows(t, b), y.middleRows(t, b), absl::MakeSpan(&nx[t], b),
                           absl::MakeSpan(&ny[t], b));
        fresh.ObserveBatch(x_neg.middleRows(t, b), y.middleRows(t, b), absl::MakeSpan(&fx[t], b),
                           absl::MakeSpan(&fy[t], b));
      } else {
        for (int i = t; i < t + b; ++i) {
          reuse.Observe(x.row(i).data(), y.row(i).data());
          fresh.Observe(x_neg.row(i).data(), y.row(i).data());
          nx[i] = reuse.last_nearest_x(), ny[i] = reuse.last_nearest_y_in_x();
          fx[i] = fresh.last_nearest_x(), fy[i] = fresh.last_nearest_y_in_x();
        }
      }
    }
    EXPECT_GT(reuse.reused_kernel_columns(), n / 2);
    EXPECT_EQ(fresh.reused_kernel_columns(), 0);
    EXPECT_EQ(reuse.dict_x_size(), fresh.dict_x_size());
    EXPECT_EQ(reuse.dict_y_size(), fresh.dict_y_size());
    EXPECT_EQ(reuse.counters().compressed, fresh.counters().compressed);
    EXPECT_EQ(reuse.counters().refactorizations, fresh.counters().refactorizations);
    EXPECT_EQ(nx, fx);
    EXPECT_EQ(ny, fy);
    EXPECT_EQ(MatrixXd(reuse.W_whitened()), MatrixXd(fresh.W_whitened()));
    EXPECT_EQ(MatrixXd(reuse.inverse_factor_x()), MatrixXd(fresh.inverse_factor_x()));
    EXPECT_EQ(MatrixXd(reuse.inverse_factor_y()), MatrixXd(fresh.inverse_factor_y()));
    EXPECT_EQ(MatrixXd(reuse.W_iterate()), MatrixXd(fresh.W_iterate()));
  }
}

// Memory follows use: an empty learner holds no matrices, capacity doubles with the dictionary.
TEST(CmeBatch, MemoryFollowsTheDictionary) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = 1000;
  o.epsilon = 1e-4;
  CompressedCme cme(o);
  EXPECT_EQ(cme.capacity(), 0);
  EXPECT_EQ(cme.HeapBytes(), 0);
  EXPECT_LT(sizeof(CompressedCme), 4096u);
  const auto data = systems::SimulateDuffing(4000, 8);
  int t = 0;
  while (cme.dict_x_size() < 200 && t < 4000) {
    cme.Observe(data.x.row(t).data(), data.y.row(t).data());
    ++t;
  }
  ASSERT_GE(cme.dict_x_size(), 200);
  const int m = std::max(cme.dict_x_size(), cme.dict_y_size());
  EXPECT_GE(cme.capacity(), m);
  EXPECT_LE(cme.capacity(), 2 * m + 16);
  // 6 capacity^2 matrices (no averaging) + atoms + scratch vectors: well under max_dict^2.
  const double cap = cme.capacity();
  EXPECT_LE(cme.HeapBytes(), 8 * (6 * cap * cap + 2 * cap * 2 + 8 * cap));
  EXPECT_LT(cme.HeapBytes(), 8.0 * 1000 * 1000);
}

}  // namespace
}  // namespace cmestream
