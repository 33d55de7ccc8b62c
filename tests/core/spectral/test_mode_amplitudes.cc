// Mode amplitudes and cycles against known signals (core/spectral/mode_amplitudes.h,
// docs/algorithms.md §7.3).
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <numbers>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/cme/compressed_cme.h"
#include "core/spectral/mode_amplitudes.h"
#include "core/spectral/spectral_estimate.h"
#include "core/spectral/spectral_moments.h"
#include "core/spectral/spectral_summary.h"

namespace cmestream {
namespace {

constexpr double kPi = std::numbers::pi;

struct Result {
  SpectralFit fit;
  ModeAmplitudes amplitudes;
  std::vector<Cycle> cycles;
  VectorXd periods;
};

// A scalar series, delay-embedded with D delays (oldest first), fed as the learner feeds it
// (CME atoms -> epochs, the daemon's schedule), fitted, amplitudes of the newest coordinate.
Result Analyze(const std::vector<double>& series, int delays, double sigma) {
  const Eigen::Index n = static_cast<Eigen::Index>(series.size()) - delays;
  RowMatrixXd x(n, delays), y(n, delays);
  for (Eigen::Index t = 0; t < n; ++t) {
    for (int j = 0; j < delays; ++j) {
      x(t, j) = series[t + j];
      y(t, j) = series[t + j + 1];
    }
  }
  CompressedCme::Options co;
  co.dim = delays;
  co.sigma = sigma;
  co.max_dict = 400;
  CompressedCme cme(co);
  SpectralMoments::Options so;
  so.dim = delays;
  so.sigma = sigma;
  so.max_basis = 400;
  so.rebase_growth = 5;
  so.min_block_length = 25;
  so.min_epoch_samples = 50;
  SpectralMoments acc(so);
  for (Eigen::Index t = 0; t < n; ++t) {
    cme.Observe(x.row(t).data(), y.row(t).data());
    if (acc.ShouldStartEpoch(cme.dict_x_size())) acc.StartEpoch(cme.x_atoms());
    acc.Observe(x.row(t).data(), y.row(t).data());
  }
  SpectralFitOptions fo;
  fo.top = 16;
  fo.ridge_grid = {1e-3, 1e-5, 1e-7};
  fo.min_share = 0.8;
  const SpectralMomentsSnapshot snap = acc.Snapshot();
  absl::StatusOr<SpectralFit> fit = FitSpectrum(snap, fo);
  EXPECT_TRUE(fit.ok()) << fit.status();
  Result r;
  if (!fit.ok()) return r;
  r.fit = *fit;
  ModeAmplitudeOptions ao;
  ao.channels = 1;
  ao.span = static_cast<double>(n);
  ao.max_period = 0.5 * ao.span;
  const auto t0 = std::chrono::steady_clock::now();
  r.amplitudes = ModeAmplitudesOfFit(r.fit, snap, ao);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("amplitudes of %ld eigenpairs over %ld atoms (d = %d): %.2f ms\n",
              static_cast<long>(r.fit.koopman.eigenvalues.size()), static_cast<long>(r.fit.koopman.x_atoms.rows()),
              delays, ms);
  r.periods = KoopmanPeriods(r.fit.koopman.eigenvalues, 1.0);
  r.cycles = RankCycles(r.fit.koopman, r.periods, r.amplitudes, ao);
  return r;
}

std::vector<double> Sines(int n, const std::vector<std::pair<double, double>>& amp_period, double noise,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<double> s(n);
  for (int t = 0; t < n; ++t) {
    double v = noise * nd(rng);
    for (const auto& [a, p] : amp_period) v += a * std::sin(2 * kPi * t / p + 0.3 * p);
    s[t] = v;
  }
  return s;
}

// A harmonic of 3 rows under a fundamental of 12 rows, amplitudes 3 : 1 (variances 4.5 : 0.5):
// one cycle of period 12 carrying 90 % (+- 0.05) of the variance, its third harmonic under it
// with 10 % (+- 0.05); the faster, least damped modes (the other harmonics of the orbit) carry
// almost nothing.
TEST(ModeAmplitudes, FundamentalAndHarmonicSharesAndPeriods) {
  const Result r = Analyze(Sines(3000, {{3.0, 12.0}, {1.0, 4.0}}, 0.05, 1), 12, 3.0);
  ASSERT_FALSE(r.cycles.empty());
  const Cycle& c = r.cycles[0];
  for (const Cycle& cy : r.cycles) {
    std::printf("cycle period %.4f share %.4f group %.4f amplitude %.4f harmonics %zu\n", cy.period, cy.share,
                cy.group_share, cy.amplitude, cy.harmonics.size());
    for (const Cycle& h : cy.harmonics) std::printf("   k=%d period %.4f share %.4f\n", h.harmonic, h.period, h.share);
  }
  EXPECT_NEAR(c.period, 12.0, 0.12);  // 1 %
  EXPECT_NEAR(c.share, 0.9, 0.05);
  // RMS of 3 sin: 3 / sqrt 2 = 2.121 (scaled units are the raw ones here), 5 %.
  EXPECT_NEAR(c.amplitude, 3.0 / std::sqrt(2.0), 0.05 * 3.0 / std::sqrt(2.0));
  bool third = false;
  for (const Cycle& h : c.harmonics) {
    if (h.harmonic == 3) {
      third = true;
      EXPECT_NEAR(h.period, 4.0, 0.04);
      EXPECT_NEAR(h.share, 0.1, 0.05);
    }
  }
  EXPECT_TRUE(third);
  EXPECT_NEAR(c.group_share, 1.0, 0.07);
  // The share of every mode of a pair is the same (one oscillation).
  const KoopmanDecomposition& kd = r.fit.koopman;
  for (Eigen::Index l = 0; l + 1 < kd.eigenvalues.size(); ++l) {
    if (kd.eigenvalues[l].imag() > 0 && std::abs(kd.eigenvalues[l + 1] - std::conj(kd.eigenvalues[l])) < 1e-9) {
      EXPECT_NEAR(r.amplitudes.share[l], r.amplitudes.share[l + 1], 1e-9);
    }
  }
  // The stationary mode carries no variance.
  EXPECT_EQ(r.amplitudes.share[kd.stationary_index], 0.0);
}

// Two unrelated oscillations (periods 12 and 7.3, not harmonics of each other), amplitudes 1 : 3:
// the ranking follows the amplitude, not |mu|: the 7.3-row one first with 90 % (+- 0.05), the
// 12-row one second with 10 % (+- 0.05), each its own group.
TEST(ModeAmplitudes, UnrelatedCyclesRankedByShare) {
  const Result r = Analyze(Sines(3000, {{1.0, 12.0}, {3.0, 7.3}}, 0.05, 2), 12, 3.0);
  ASSERT_GE(r.cycles.size(), 2u);
  EXPECT_NEAR(r.cycles[0].period, 7.3, 0.073);
  EXPECT_NEAR(r.cycles[0].share, 0.9, 0.05);
  bool found = false;
  for (size_t i = 1; i < r.cycles.size(); ++i) {
    if (std::abs(r.cycles[i].period - 12.0) < 0.12) {
      found = true;
      EXPECT_NEAR(r.cycles[i].share, 0.1, 0.05);
    }
  }
  EXPECT_TRUE(found);
}

// A linear system with known modes: a damped rotation of the 2-D state, observed whole: the
// pair e^{-0.01 +- i 2 pi / 20} carries all the variance of the observed coordinates (linear
// observables are that pair's eigenfunctions); shares computed over given nodes with uniform
// weights (ComputeModeAmplitudes directly, no fit): 1 within 1e-9.
TEST(ModeAmplitudes, LinearObservablesOfARotationAreOnePair) {
  KoopmanDecomposition kd;
  const std::complex<double> mu = std::exp(std::complex<double>(-0.01, 2 * kPi / 20));
  kd.eigenvalues.resize(3);
  kd.eigenvalues << 1.0, mu, std::conj(mu);
  kd.timescales.resize(3);
  kd.timescales << std::numeric_limits<double>::infinity(), 100.0, 100.0;
  kd.stationary_index = 0;
  // Eigenfunctions over the constant plus a dictionary; here we place the linear eigenfunctions
  // x1 + i x2 through the constant's slot by a dictionary of the nodes with a tiny bandwidth: a
  // bump per node evaluates to 1 at its node and ~0 elsewhere, so v = values at the nodes.
  const int m = 200;
  RowMatrixXd nodes(m, 2);
  for (int j = 0; j < m; ++j) {
    const double a = 2 * kPi * j / m;
    nodes(j, 0) = (1 + 0.5 * std::cos(3 * a)) * std::cos(a);
    nodes(j, 1) = (1 + 0.5 * std::cos(3 * a)) * std::sin(a);
  }
  kd.x_atoms = nodes;
  kd.sigma = 1e-3;
  kd.constants = VectorXcd::Zero(3);
  kd.constants[0] = 1.0;
  kd.eigenvectors = MatrixXcd::Zero(m, 3);
  for (int j = 0; j < m; ++j) {
    kd.eigenvectors(j, 1) = std::complex<double>(nodes(j, 0), nodes(j, 1));
    kd.eigenvectors(j, 2) = std::complex<double>(nodes(j, 0), -nodes(j, 1));
  }
  ModeAmplitudeOptions ao;  // all channels
  const ModeAmplitudes a = ComputeModeAmplitudes(kd, nodes, VectorXd(), ao);
  EXPECT_EQ(a.share[0], 0.0);
  EXPECT_NEAR(a.share[1], 1.0, 1e-9);
  EXPECT_NEAR(a.share[2], 1.0, 1e-9);
  EXPECT_NEAR(a.amplitude[1], std::sqrt(a.variance), 1e-9);
  // One channel (the last coordinate): still all of its variance.
  ao.channels = 1;
  EXPECT_NEAR(ComputeModeAmplitudes(kd, nodes, VectorXd(), ao).share[1], 1.0, 1e-9);
  const std::vector<Cycle> cycles = RankCycles(kd, KoopmanPeriods(kd.eigenvalues, 1.0), a, ModeAmplitudeOptions{});
  ASSERT_EQ(cycles.size(), 1u);  // one per pair
  EXPECT_NEAR(cycles[0].period, 20.0, 1e-9);
  EXPECT_EQ(cycles[0].mode, 1);
  EXPECT_EQ(cycles[0].timescale, 100.0);
}

// The background: f = 10 u + sin a over nodes (u, cos a, sin a, f), u a trend in [0, 1], a a
// phase of period 40. A real mode with eigenfunction u and |mu| = 1 is the background; the
// cycle's eigenfunction e^{ia} + 0.5 (1 + i) u leans on the trend; a fast-decaying "cycle" of
// period 19 with eigenfunction u + i u^2 is a smooth function of the trend. Fitted alone, the
// latter explains ~94 % of the variance; with the background partialled out it explains ~0,
// and the cycle its own sin a: 0.5 / (100/12 + 0.5) = 0.0566 (+- 0.005: the grid's u and a are
// not exactly uncorrelated). Evaluated through a dictionary of the nodes with a tiny bandwidth
// (a bump per node: 1 at its node, ~0 at the others), so v = the values at the nodes.
TEST(ModeAmplitudes, BackgroundIsPartialledOut) {
  const int m = 400;
  RowMatrixXd nodes(m, 4);
  for (int j = 0; j < m; ++j) {
    const double u = (j + 0.5) / m, a = 2 * kPi * (j % 40) / 40.0;
    nodes.row(j) << u, std::cos(a), std::sin(a), 10 * u + std::sin(a);
  }
  KoopmanDecomposition kd;
  const std::complex<double> cyc = std::polar(0.99, 2 * kPi / 40), fast = std::polar(0.8, 2 * kPi / 19);
  kd.eigenvalues.resize(6);
  kd.eigenvalues << 1.0, 1.0, cyc, std::conj(cyc), fast, std::conj(fast);
  kd.timescales.resize(6);
  const double inf = std::numeric_limits<double>::infinity();
  kd.timescales << inf, inf, -1 / std::log(0.99), -1 / std::log(0.99), -1 / std::log(0.8), -1 / std::log(0.8);
  kd.stationary_index = 0;
  kd.x_atoms = nodes;
  kd.sigma = 1e-4;
  kd.constants = VectorXcd::Zero(6);
  kd.constants[0] = 1.0;
  kd.eigenvectors = MatrixXcd::Zero(m, 6);
  for (int j = 0; j < m; ++j) {
    const double u = nodes(j, 0);
    const std::complex<double> e(nodes(j, 1), nodes(j, 2));
    kd.eigenvectors(j, 1) = u;
    kd.eigenvectors(j, 2) = e + 0.5 * std::complex<double>(1, 1) * u;
    kd.eigenvectors(j, 3) = std::conj(kd.eigenvectors(j, 2));
    kd.eigenvectors(j, 4) = std::complex<double>(u, u * u);
    kd.eigenvectors(j, 5) = std::conj(kd.eigenvectors(j, 4));
  }
  ModeAmplitudeOptions ao;
  ao.channels = 1;
  const ModeAmplitudes alone = ComputeModeAmplitudes(kd, nodes, VectorXd(), ao);  // no max_period: no background
  EXPECT_GT(alone.share[4], 0.9);
  ao.max_period = 100;
  ao.span = 200;
  const ModeAmplitudes a = ComputeModeAmplitudes(kd, nodes, VectorXd(), ao);
  EXPECT_TRUE(a.background[1]);
  EXPECT_FALSE(a.background[2]);
  EXPECT_GT(a.share[1], 0.9);  // the trend, fitted alone
  EXPECT_NEAR(a.share[2], 0.5 / (100.0 / 12 + 0.5), 0.005);
  EXPECT_LT(a.share[4], 0.01);
  const std::vector<Cycle> c = RankCycles(kd, KoopmanPeriods(kd.eigenvalues, 1.0), a, ao);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_NEAR(c[0].period, 40.0, 1e-9);
  EXPECT_NEAR(c[0].peak, a.share[2] * kd.timescales[2], 1e-12);
  EXPECT_NEAR(c[1].period, 19.0, 1e-9);
}

// Grouping by the 2 % rule: a stronger 6-row oscillation is re-rooted under a weaker 12-row
// one (its harmonic k = 2); 4.1 rows (2.5 % off 12/3) is not a harmonic; 186 rows is left out
// past max_period.
TEST(ModeAmplitudes, HarmonicGroupingRule) {
  KoopmanDecomposition kd;
  const std::vector<double> p = {6.0, 12.05, 4.1, 186.0, 3.0};
  const std::vector<double> share = {0.5, 0.3, 0.1, 0.05, 0.04};
  const int k = static_cast<int>(p.size());
  kd.eigenvalues.resize(k);
  kd.timescales = VectorXd::Constant(k, 50.0);
  ModeAmplitudes a;
  a.share.resize(k);
  a.amplitude.resize(k);
  for (int l = 0; l < k; ++l) {
    kd.eigenvalues[l] = std::polar(0.99, 2 * kPi / p[l]);
    a.share[l] = share[l];
    a.amplitude[l] = std::sqrt(share[l]);
  }
  ModeAmplitudeOptions ao;
  ao.max_period = 100;
  const std::vector<Cycle> c = RankCycles(kd, KoopmanPeriods(kd.eigenvalues, 1.0), a, ao);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_NEAR(c[0].period, 12.05, 1e-9);
  ASSERT_EQ(c[0].harmonics.size(), 2u);
  EXPECT_EQ(c[0].harmonics[0].harmonic, 2);  // 6 rows
  EXPECT_EQ(c[0].harmonics[1].harmonic, 4);  // 3 rows
  EXPECT_NEAR(c[0].group_share, 0.3 + 0.5 + 0.04, 1e-12);
  EXPECT_NEAR(c[1].period, 4.1, 1e-9);
  EXPECT_TRUE(c[1].harmonics.empty());
}

}  // namespace
}  // namespace cmestream
