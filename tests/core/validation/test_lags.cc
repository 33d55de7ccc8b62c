// Lagged moments, implied timescales vs lag, CK test and jackknife error bars
// (core/validation; docs/algorithms.md §8), against systems with known ground truth.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "Eigen/Eigenvalues"

#include "core/io/binary_io.h"
#include "core/kernels/gaussian.h"
#include "core/systems/four_well.h"
#include "core/validation/lag_estimate.h"
#include "core/validation/lag_statistics.h"
#include "core/validation/lagged_moments.h"

namespace cmestream {
namespace {

// ---------------------------------------------------------------------------------------------
// Bookkeeping: the sums equal the closed form, pairs never cross an episode, unordered pairs
// feed lag 1 only, blocks merge and the total is preserved.
TEST(LaggedMoments, SumsMatchTheClosedFormAndNeverCrossAnEpisode) {
  LaggedMoments::Options o;
  o.lags = {1, 3};
  o.dim = 2;
  o.max_blocks = 4;
  o.initial_block_length = 2;
  LaggedMoments acc(o);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd;
  // Two episodes of 5 and 4 states.
  RowMatrixXd ep1(5, 2), ep2(4, 2);
  for (int i = 0; i < 5; ++i) ep1.row(i) << nd(rng), nd(rng);
  for (int i = 0; i < 4; ++i) ep2.row(i) << nd(rng), nd(rng);
  acc.StartEpisode();
  for (int i = 0; i < 5; ++i) acc.Observe(ep1.row(i).data());
  acc.StartEpisode();
  for (int i = 0; i < 4; ++i) acc.Observe(ep2.row(i).data());
  const double px[2] = {0.5, -1}, py[2] = {2, 3};
  acc.ObservePair(px, py);
  const LaggedMomentsSnapshot s = acc.Snapshot();
  EXPECT_EQ(s.samples, 10);
  EXPECT_EQ(s.trajectory_states, 9);
  EXPECT_EQ(s.unordered_pairs, 1);
  // Lag 1: 4 + 3 in-episode pairs + the unordered pair; lag 3: 2 + 1.
  MatrixXd c00 = MatrixXd::Zero(2, 2), c01 = MatrixXd::Zero(2, 2), c30 = MatrixXd::Zero(2, 2), c03 = c30;
  for (const RowMatrixXd* e : {&ep1, &ep2}) {
    for (int t = 1; t < e->rows(); ++t) {
      c00 += e->row(t - 1).transpose() * e->row(t - 1);
      c01 += e->row(t - 1).transpose() * e->row(t);
    }
    for (int t = 3; t < e->rows(); ++t) {
      c30 += e->row(t - 3).transpose() * e->row(t - 3);
      c03 += e->row(t - 3).transpose() * e->row(t);
    }
  }
  Eigen::Map<const Eigen::Vector2d> vx(px), vy(py);
  c00 += vx * vx.transpose();
  c01 += vx * vy.transpose();
  EXPECT_EQ(s.total[0].n, 8);
  EXPECT_EQ(s.total[1].n, 3);
  EXPECT_LT((s.total[0].c00 - c00).norm(), 1e-12);
  EXPECT_LT((s.total[0].c0t - c01).norm(), 1e-12);
  EXPECT_LT((s.total[1].c00 - c30).norm(), 1e-12);
  EXPECT_LT((s.total[1].c0t - c03).norm(), 1e-12);
  // 10 samples, 4 slots of length 2: the 8th sample fills the 4th block, neighbours merge into
  // 2 blocks of 4 and the length doubles; samples 9-10 open the third block.
  ASSERT_EQ(s.block_samples.size(), 3u);
  EXPECT_EQ(s.block_samples[0], 4);
  EXPECT_EQ(s.block_samples[1], 4);
  EXPECT_EQ(s.block_samples[2], 2);
  EXPECT_EQ(acc.block_length(), 4);
  // The blocks are contiguous: block 0 holds the first 4 samples (episode 1's states 0-3).
  MatrixXd b0 = MatrixXd::Zero(2, 2);
  for (int t = 1; t < 4; ++t) b0 += ep1.row(t - 1).transpose() * ep1.row(t);
  EXPECT_LT((s.blocks[0][0].c0t - b0).norm(), 1e-12);
}

TEST(LaggedMoments, UnorderedPairsWithoutLagOneFeedNothingAndBadOptionsAreNamed) {
  LaggedMoments::Options o;
  o.lags = {2, 5};
  o.dim = 3;
  o.one_hot = true;
  LaggedMoments acc(o);
  acc.ObservePairState(0, 1);
  const auto s = acc.Snapshot();
  EXPECT_EQ(s.total[0].n, 0);
  EXPECT_EQ(s.unordered_pairs, 1);
  auto bad = [](std::vector<int> lags) {
    LaggedMoments::Options b;
    b.lags = std::move(lags);
    return std::string(b.Validate().message());
  };
  EXPECT_NE(bad({0, 1}).find("is positive"), std::string::npos);
  EXPECT_NE(bad({2, 2}).find("strictly increasing"), std::string::npos);
  EXPECT_NE(bad({1, 5000}).find("at most 1000"), std::string::npos);
  EXPECT_NE(bad({}).find("not empty"), std::string::npos);
}

TEST(LaggedMoments, SerializationRoundTripContinuesBitIdentically) {
  LaggedMoments::Options o;
  o.lags = {1, 2, 4};
  o.dim = 3;
  o.max_blocks = 4;
  o.initial_block_length = 3;
  LaggedMoments a(o);
  std::mt19937_64 rng(9);
  std::normal_distribution<double> nd;
  auto feed = [&](LaggedMoments& m, std::mt19937_64& g, int n) {
    std::normal_distribution<double> d;
    for (int i = 0; i < n; ++i) {
      double v[3] = {d(g), d(g), d(g)};
      if (i % 17 == 0) m.StartEpisode();
      m.Observe(v);
    }
  };
  feed(a, rng, 41);
  io::Writer w;
  a.Serialize(w);
  io::Reader r(w.data(), "test");
  absl::StatusOr<LaggedMoments> b = LaggedMoments::Deserialize(r);
  ASSERT_TRUE(b.ok()) << b.status();
  std::mt19937_64 g1(77), g2(77);
  feed(a, g1, 50);
  feed(*b, g2, 50);
  io::Writer wa, wb;
  a.Serialize(wa);
  b->Serialize(wb);
  EXPECT_EQ(wa.data(), wb.data());
  // A truncated image is an error, not a crash.
  io::Reader t(std::string_view(w.data()).substr(0, w.size() / 2), "truncated");
  EXPECT_FALSE(LaggedMoments::Deserialize(t).ok());
}

// The service's lag statistics (continuous): the basis spreads over the atoms (farthest point),
// features and the count state agree, a Rebase restarts the sums, and a snapshot image continues
// bit-identically (the basis and sigma_B included).
TEST(LagStatistics, ContinuousBasisRebaseAndSerializationRoundTrip) {
  LagStatistics::Options o;
  o.lags = {1, 4};
  o.dim = 1;
  o.sigma = 0.01;
  o.max_basis = 5;
  LagStatistics acc(o);
  const double x0[1] = {0.3};
  acc.ObserveState(x0);  // no basis yet: not counted
  EXPECT_FALSE(acc.has_basis());
  RowMatrixXd atoms(9, 1);
  atoms << 0.0, 0.1, 0.2, 1.0, 1.1, 2.0, 2.05, 3.0, 4.0;
  ASSERT_TRUE(acc.NeedsRebase(1));
  acc.Rebase(atoms, 1);
  EXPECT_FALSE(acc.NeedsRebase(1));
  LagStatisticsSnapshot s = acc.Snapshot();
  // Farthest-point from atom 0: 4.0, then 2.0, then 1.0 / 3.0 (distance 1 each, first wins), ...
  ASSERT_EQ(s.basis_atoms.size(), 5u);
  EXPECT_EQ(s.basis_atoms[0], 0);
  EXPECT_EQ(s.basis_atoms[1], 8);
  EXPECT_EQ(s.basis_atoms[2], 5);
  EXPECT_GT(s.sigma, o.sigma) << "sigma_B widens to the mean nearest-neighbour spacing";
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(0, 4);
  auto feed = [&](LagStatistics& a, std::mt19937_64& g, int n) {
    std::uniform_real_distribution<double> v(0, 4);
    for (int t = 0; t < n; ++t) {
      const double x[1] = {v(g)};
      if (t % 50 == 0) a.StartEpisode();
      if (t % 7 == 0) {
        const double y[1] = {v(g)};
        a.ObservePair(x, y);
      } else {
        a.ObserveState(x);
      }
    }
  };
  feed(acc, rng, 300);
  s = acc.Snapshot();
  EXPECT_EQ(s.counts->samples, 300);
  EXPECT_EQ(s.koopman->samples, 300);
  // The Koopman sums' constant row counts the pairs; the count chain has the same pairs.
  EXPECT_DOUBLE_EQ(s.koopman->total[0].c00(0, 0), s.counts->total[0].n);
  EXPECT_DOUBLE_EQ(s.koopman->total[1].n, s.counts->total[1].n);
  io::Writer w;
  acc.Serialize(w);
  io::Reader r(w.data(), "test");
  absl::StatusOr<LagStatistics> back = LagStatistics::Deserialize(r);
  ASSERT_TRUE(back.ok()) << back.status();
  std::mt19937_64 g1(8), g2(8);
  feed(acc, g1, 200);
  feed(*back, g2, 200);
  io::Writer wa, wb;
  acc.Serialize(wa);
  back->Serialize(wb);
  EXPECT_EQ(wa.data(), wb.data());
  io::Reader t(std::string_view(w.data()).substr(0, w.size() - 9), "truncated");
  EXPECT_FALSE(LagStatistics::Deserialize(t).ok());
  // A new source epoch restarts the sums on a new basis.
  acc.Rebase(atoms.topRows(3), 2);
  s = acc.Snapshot();
  EXPECT_EQ(s.basis.rows(), 3);
  EXPECT_EQ(s.counts->samples, 0);
}

// ---------------------------------------------------------------------------------------------
// Four-well 1-D: 200 episodes x 500 states, lags 1, 2, 5, 10.
struct FourWellRun {
  LaggedMomentsSnapshot koopman, counts;
  RowMatrixXd atoms;
  double sigma = 0;
  MatrixXd koopman_sets, count_sets;
  VectorXd truth;  // three slowest timescales (time units)
};

constexpr int kBins = 100;
constexpr double kLo = -2.2, kHi = 2.2;

int Bin(double x) { return std::clamp(static_cast<int>((x - kLo) / (kHi - kLo) * kBins), 0, kBins - 1); }

const FourWellRun& FourWell() {
  static const FourWellRun* run = [] {
    auto* r = new FourWellRun;
    const systems::FourWellOptions fw;
    const int atoms = 40;
    r->atoms.resize(atoms, 1);
    for (int j = 0; j < atoms; ++j) r->atoms(j, 0) = -2.1 + 4.2 * j / (atoms - 1);
    r->sigma = 4.2 / (atoms - 1);
    LaggedMoments::Options ko;
    ko.lags = {1, 2, 5, 10};
    ko.dim = atoms + 1;
    LaggedMoments::Options co = ko;
    co.dim = kBins;
    co.one_hot = true;
    LaggedMoments kacc(ko), cacc(co);
    VectorXd psi(atoms + 1);
    for (int e = 0; e < 200; ++e) {
      const systems::Transitions tr = systems::SimulateFourWell(499, 1000 + e, fw);
      kacc.StartEpisode();
      cacc.StartEpisode();
      for (int t = 0; t < 500; ++t) {
        const double x = t < 499 ? tr.x(t, 0) : tr.y(498, 0);
        RowMatrixXd p(1, 1);
        p(0, 0) = x;
        psi[0] = 1;
        psi.tail(atoms) = GaussianGram(p, r->atoms, r->sigma).row(0).transpose();
        kacc.Observe(psi.data());
        cacc.ObserveState(Bin(x));
      }
    }
    r->koopman = kacc.Snapshot();
    r->counts = cacc.Snapshot();
    // Metastable sets: the wells (ground truth), as memberships of the atoms / bins.
    Eigen::VectorXi atom_well = systems::FourWellIndex(r->atoms, fw);
    MatrixXd f(atoms, atoms + 1);
    f.col(0).setOnes();
    f.rightCols(atoms) = GaussianGram(r->atoms, r->atoms, r->sigma);
    VectorXd w = systems::FourWellStationaryDensity(r->atoms.col(0), fw);
    r->koopman_sets = MembershipCoefficients(f, w, atom_well, 4);
    RowMatrixXd centers(kBins, 1);
    for (int b = 0; b < kBins; ++b) centers(b, 0) = kLo + (b + 0.5) * (kHi - kLo) / kBins;
    const Eigen::VectorXi bin_well = systems::FourWellIndex(centers, fw);
    r->count_sets = MatrixXd::Zero(kBins, 4);
    for (int b = 0; b < kBins; ++b) r->count_sets(b, bin_well[b]) = 1;
    const VectorXd ev = systems::FourWellEigenvalues(4, fw);
    r->truth.resize(3);
    for (int l = 0; l < 3; ++l) r->truth[l] = -fw.tau / std::log(ev[l + 1]);
    return r;
  }();
  return *run;
}

void CheckTimescales(const LaggedMomentsSnapshot& snap, const LagEstimateOptions& o, const char* name) {
  const FourWellRun& run = FourWell();
  absl::StatusOr<LagTimescales> its = EstimateImpliedTimescales(snap, o);
  ASSERT_TRUE(its.ok()) << its.status();
  int covered = 0;
  for (size_t k = 0; k < its->lags.size(); ++k) {
    std::printf("%s lag %2d (%6.0f pairs):", name, its->lags[k], its->pairs[k]);
    for (int i = 0; i < 3; ++i) {
      const double t = its->timescales[k][i], se = its->stderrs[k][i];
      std::printf("  %.3f +- %.3f (truth %.3f)", t, se, run.truth[i]);
      EXPECT_NEAR(t / run.truth[i], 1.0, 0.10) << name << " lag " << its->lags[k] << " timescale " << i;
      EXPECT_GT(se, 0);
      if (std::abs(t - run.truth[i]) <= 3 * se) ++covered;
    }
    std::printf("\n");
  }
  std::printf("%s: truth within 3 s.e. for %d of 12 (blocks %d)\n", name, covered, its->blocks);
  EXPECT_GE(covered, 11) << "truth inside +-3 s.e. for >= 90 % of the 12 estimates";
}

LagEstimateOptions KoopmanOptions() {
  LagEstimateOptions o;
  o.dt = 0.1;
  o.ridge = 1e-8;
  o.constant_index = 0;
  return o;
}

LagEstimateOptions CountOptions() {
  LagEstimateOptions o;
  o.dt = 0.1;
  return o;
}

TEST(LagsFourWell, KoopmanTimescalesWithin10PercentAtEveryLagAndCoveredBy3Stderr) {
  CheckTimescales(FourWell().koopman, KoopmanOptions(), "koopman");
}

TEST(LagsFourWell, CountChainTimescalesWithin10PercentAtEveryLagAndCoveredBy3Stderr) {
  CheckTimescales(FourWell().counts, CountOptions(), "counts");
}

void PrintCk(const CkTest& ck, const char* name) {
  for (const CkStep& st : ck.steps) {
    std::printf("%s CK lag %d x %d: max deviation %.4f +- %.4f\n", name, ck.lag, st.steps, st.max_deviation,
                st.max_deviation_stderr);
  }
}

TEST(LagsFourWell, CkDeviationAtMost005At5StepsForKoopmanAndCountChain) {
  const FourWellRun& run = FourWell();
  absl::StatusOr<CkTest> k = ChapmanKolmogorovTest(run.koopman, run.koopman_sets, 1, 10, KoopmanOptions());
  absl::StatusOr<CkTest> c = ChapmanKolmogorovTest(run.counts, run.count_sets, 1, 10, CountOptions());
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_TRUE(c.ok()) << c.status();
  PrintCk(*k, "koopman");
  PrintCk(*c, "counts");
  for (const CkTest* t : {&*k, &*c}) {
    ASSERT_EQ(t->steps.size(), 3u);  // lags 2, 5, 10
    EXPECT_EQ(t->steps[1].steps, 5);
    EXPECT_LE(t->steps[1].max_deviation, 0.05);
    // Rows are (close to) distributions.
    for (const CkStep& st : t->steps) {
      EXPECT_LT((st.estimated.rowwise().sum().array() - 1).abs().maxCoeff(), 0.02);
      EXPECT_LT((st.predicted.rowwise().sum().array() - 1).abs().maxCoeff(), 0.02);
      // Every entry has an error bar (0 only where no block ever saw that transition).
      EXPECT_GE(st.estimated_stderr.minCoeff(), 0);
      EXPECT_GT(st.estimated_stderr.diagonal().minCoeff(), 0);
    }
  }
  // Bad requests are named.
  auto bad_lag = ChapmanKolmogorovTest(run.counts, run.count_sets, 3, 10, CountOptions());
  EXPECT_EQ(bad_lag.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_multiple = ChapmanKolmogorovTest(run.counts, run.count_sets, 10, 10, CountOptions());
  EXPECT_EQ(no_multiple.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_multiple.status().message().find("multiples"), std::string::npos);
}

// Non-Markovian coarse-graining: the first coordinate of the 2-D multi-well lumped into its
// two halves (x < 0, x > 0) and counted at lag 1 (0.1 time units, far below the barrier-crossing
// time: recrossings make the lumped chain remember where it is inside a well). A fine
// discretization of the same coordinate, tested on the same two sets, is nearly Markovian.
TEST(LagsCk, DetectsANonMarkovianCoarseGraining) {
  const systems::MultiWell2dOptions mo;
  LaggedMoments::Options coarse_o;
  coarse_o.lags = {1, 2, 5, 10};
  coarse_o.dim = 2;
  coarse_o.one_hot = true;
  LaggedMoments::Options fine_o = coarse_o;
  fine_o.dim = 60;
  LaggedMoments coarse(coarse_o), fine(fine_o);
  auto fine_bin = [](double x) { return std::clamp(static_cast<int>((x + 1.5) / 3.0 * 60), 0, 59); };
  for (int e = 0; e < 100; ++e) {
    const systems::Transitions tr = systems::SimulateMultiWell2d(499, 500 + e, mo);
    coarse.StartEpisode();
    fine.StartEpisode();
    for (int t = 0; t < 500; ++t) {
      const double x = t < 499 ? tr.x(t, 0) : tr.y(498, 0);
      coarse.ObserveState(x > 0 ? 1 : 0);
      fine.ObserveState(fine_bin(x));
    }
  }
  MatrixXd coarse_sets = MatrixXd::Identity(2, 2), fine_sets = MatrixXd::Zero(60, 2);
  for (int b = 0; b < 60; ++b) fine_sets(b, (-1.5 + (b + 0.5) * 0.05) > 0 ? 1 : 0) = 1;
  auto c = ChapmanKolmogorovTest(coarse.Snapshot(), coarse_sets, 1, 10, CountOptions());
  auto f = ChapmanKolmogorovTest(fine.Snapshot(), fine_sets, 1, 10, CountOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(f.ok()) << f.status();
  PrintCk(*c, "2-state lumping");
  PrintCk(*f, "60-bin chain");
  EXPECT_GT(c->max_deviation, 3 * f->max_deviation);
  EXPECT_GT(c->max_deviation, 5 * c->max_deviation_stderr) << "the deviation is far outside its error bar";
  EXPECT_LT(f->max_deviation, 0.05);
}

// ---------------------------------------------------------------------------------------------
// Coverage on a closed-form 3-state chain: nominal 95 % intervals (+- t(0.975, g-1) s.e., g the
// number of blocks, JackknifeT95) of the slowest timescale at lag 1 and of the 2-step transition
// probability T(2)_01 (a CK estimate with the states as sets) cover the truth in 90-99 % of 200
// seeded runs of 8000 steps. The +-1.96 s.e. coverage is printed for comparison.
TEST(LagsCoverage, JackknifeIntervalsCoverAClosedFormChain) {
  Eigen::Matrix3d p;
  p << 0.90, 0.08, 0.02,  //
      0.05, 0.90, 0.05,   //
      0.02, 0.08, 0.90;
  Eigen::EigenSolver<Eigen::Matrix3d> es(p);
  std::vector<double> mods;
  for (int i = 0; i < 3; ++i) mods.push_back(std::abs(es.eigenvalues()[i]));
  std::sort(mods.rbegin(), mods.rend());
  const double t_true = -1.0 / std::log(mods[1]);
  const Eigen::Matrix3d p2 = p * p;
  int cover_t = 0, cover_p = 0, cover_t_z = 0, cover_p_z = 0;
  const int runs = 200;
  for (int run = 0; run < runs; ++run) {
    LaggedMoments::Options o;
    o.lags = {1, 2};
    o.dim = 3;
    o.one_hot = true;
    LaggedMoments acc(o);
    std::mt19937_64 rng(run + 1);
    std::uniform_real_distribution<double> u;
    int s = 0;
    acc.StartEpisode();
    for (int t = 0; t < 8000; ++t) {
      acc.ObserveState(s);
      const double r = u(rng);
      s = r < p(s, 0) ? 0 : (r < p(s, 0) + p(s, 1) ? 1 : 2);
    }
    const LaggedMomentsSnapshot snap = acc.Snapshot();
    LagEstimateOptions eo;
    eo.top = 1;
    const auto its = EstimateImpliedTimescales(snap, eo);
    ASSERT_TRUE(its.ok());
    const double q = JackknifeT95(its->blocks);
    ASSERT_GE(its->blocks, 9);
    if (std::abs(its->timescales[0][0] - t_true) <= q * its->stderrs[0][0]) ++cover_t;
    if (std::abs(its->timescales[0][0] - t_true) <= 1.96 * its->stderrs[0][0]) ++cover_t_z;
    const auto ck = ChapmanKolmogorovTest(snap, MatrixXd::Identity(3, 3), 1, 2, eo);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const CkStep& st = ck->steps[0];
    if (std::abs(st.estimated(0, 1) - p2(0, 1)) <= JackknifeT95(ck->blocks) * st.estimated_stderr(0, 1)) ++cover_p;
    if (std::abs(st.estimated(0, 1) - p2(0, 1)) <= 1.96 * st.estimated_stderr(0, 1)) ++cover_p_z;
  }
  std::printf(
      "coverage of nominal 95%% intervals over %d runs: timescale %.3f, T(2)_01 %.3f (t quantile); "
      "%.3f, %.3f (+-1.96 s.e.)\n",
      runs, cover_t / double(runs), cover_p / double(runs), cover_t_z / double(runs), cover_p_z / double(runs));
  EXPECT_GE(cover_t, 0.90 * runs);
  EXPECT_LE(cover_t, 0.99 * runs);
  EXPECT_GE(cover_p, 0.90 * runs);
  EXPECT_LE(cover_p, 0.99 * runs);
}

}  // namespace
}  // namespace cmestream
