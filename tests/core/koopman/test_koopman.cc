// Koopman eigenpairs of the compressed CME on the Duffing oscillator (docs/algorithms.md §1)
// against the basins found by integration, plus the normalization contract.
#include <chrono>
#include <cmath>
#include <complex>
#include <limits>

#include <gtest/gtest.h>

#include "core/cme/bandwidth.h"
#include "core/cme/compressed_cme.h"
#include "core/koopman/koopman.h"
#include "core/systems/duffing.h"

namespace cmestream {
namespace {

RowMatrixXd Grid(int side, double box) {
  RowMatrixXd g(side * side, 2);
  for (int i = 0; i < side; ++i)
    for (int j = 0; j < side; ++j) {
      g(i * side + j, 0) = -box + 2 * box * (i + 0.5) / side;
      g(i * side + j, 1) = -box + 2 * box * (j + 0.5) / side;
    }
  return g;
}

// Nearest-attractor rule (docs/algorithms.md §1.10, (1.25)): embed each point by the real
// and imaginary parts of the two leading eigenfunctions and label it by the nearer of the
// embedded attractors (1,0) -> +1 and (-1,0) -> -1.
Eigen::VectorXi ClassifyBasins(const KoopmanDecomposition& kd, const RowMatrixXd& points) {
  RowMatrixXd attractors(2, 2);
  attractors << 1, 0, -1, 0;
  const MatrixXcd ga = kd.Evaluate(attractors).leftCols(2);
  const MatrixXcd gp = kd.Evaluate(points).leftCols(2);
  Eigen::VectorXi label(points.rows());
  for (Eigen::Index i = 0; i < points.rows(); ++i) {
    const double dp = (gp.row(i) - ga.row(0)).squaredNorm();
    const double dm = (gp.row(i) - ga.row(1)).squaredNorm();
    label[i] = dp <= dm ? 1 : -1;
  }
  return label;
}

struct DuffingRun {
  double accuracy = 0;
  int dict_x = 0, dict_y = 0;
  KoopmanDecomposition kd;
};

DuffingRun RunDuffing(double sigma, int n, bool one_sided = true) {
  const systems::DuffingOptions dopt;
  const auto data = systems::SimulateDuffing(n, 7, dopt);
  CompressedCme::Options o;
  o.dim = 2;
  o.sigma = sigma;
  o.one_sided = one_sided;
  CompressedCme cme(o);
  cme.ObserveBatch(data.x, data.y);
  cme.CheckDriftAndRefactorize();
  KoopmanOptions ko;
  ko.top = 6;
  ko.dt = dopt.dt;
  DuffingRun run;
  run.kd = KoopmanDecomposition::Fit(CmeSnapshot::From(cme), ko).value();
  const RowMatrixXd grid = Grid(40, 2.0);
  const Eigen::VectorXi truth = systems::DuffingBasin(grid, dopt);
  const Eigen::VectorXi pred = ClassifyBasins(run.kd, grid);
  run.accuracy = (truth.array() == pred.array()).cast<double>().mean();
  run.dict_x = cme.dict_x_size();
  run.dict_y = cme.dict_y_size();
  return run;
}

TEST(KoopmanDuffing, DefaultSigmaClassifiesBasins) {
  const int n = 20000;
  const auto t0 = std::chrono::steady_clock::now();
  const DuffingRun run = RunDuffing(0.4, n);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("sigma=0.4: accuracy %.4f, m_x=%d m_y=%d, mu = ", run.accuracy, run.dict_x, run.dict_y);
  for (int l = 0; l < run.kd.eigenvalues.size(); ++l)
    std::printf("(%.4f%+.4fi) ", run.kd.eigenvalues[l].real(), run.kd.eigenvalues[l].imag());
  std::printf(" [%.1f s]\n", secs);
  EXPECT_GE(run.accuracy, 0.95);
  EXPECT_LT(run.dict_x, 0.05 * n);
  EXPECT_LT(run.dict_y, 0.05 * n);
  // A stochastic (Koopman) operator has spectrum in the unit disc; estimation error allowed.
  for (int l = 0; l < run.kd.eigenvalues.size(); ++l) EXPECT_LE(std::abs(run.kd.eigenvalues[l]), 1.02);
  // The constant function: leading eigenvalue ~ 1.
  EXPECT_NEAR(run.kd.eigenvalues[0].real(), 1.0, 0.03);
  EXPECT_NEAR(run.kd.eigenvalues[0].imag(), 0.0, 0.03);
}

TEST(KoopmanDuffing, AutoSigmaClassifiesBasins) {
  const systems::DuffingOptions dopt;
  const auto warm = systems::SimulateDuffing(2000, 11, dopt);
  const BandwidthSelection sel = SelectBandwidth(warm.x, warm.y, BandwidthSelectionOptions{});
  std::printf("auto sigma: median %.3f, chosen %.3f; scores:", sel.median_distance, sel.chosen);
  for (size_t i = 0; i < sel.scores.size(); ++i) std::printf(" %.3f:%.4f", sel.candidates[i], sel.scores[i]);
  std::printf("\n");
  const DuffingRun run = RunDuffing(sel.chosen, 20000);
  std::printf("auto sigma %.3f: accuracy %.4f, m_x=%d m_y=%d\n", sel.chosen, run.accuracy, run.dict_x, run.dict_y);
  EXPECT_GE(run.accuracy, 0.95);
  EXPECT_LT(run.dict_x, 1000);
}

// A matrix the QR iteration cannot handle (non-finite entries) must be reported, never read as
// eigenvalues that were not computed.
TEST(KoopmanContract, EigensolverFailureIsReported) {
  CmeSnapshot s;
  s.dim = 1;
  s.sigma = 1;
  s.x_atoms = VectorXd::LinSpaced(4, 0, 3);
  s.y_atoms = s.x_atoms;
  s.W = MatrixXd::Identity(4, 4);
  KoopmanOptions o;
  o.top = 3;
  const absl::StatusOr<KoopmanDecomposition> good = KoopmanDecomposition::Fit(s, o);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->eigenvalues.size(), 3);
  s.W(1, 2) = std::numeric_limits<double>::quiet_NaN();
  const absl::StatusOr<KoopmanDecomposition> bad = KoopmanDecomposition::Fit(s, o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("did not converge"), std::string::npos) << bad.status();
}

// Invalid options are named, and the decomposition is empty (not a spectrum at a wrong dt).
TEST(KoopmanContract, InvalidOptionsAreReportedNotUsed) {
  CmeSnapshot s;
  s.dim = 1;
  s.sigma = 1;
  s.x_atoms = VectorXd::LinSpaced(4, 0, 3);
  s.y_atoms = s.x_atoms;
  s.W = MatrixXd::Identity(4, 4);
  KoopmanOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.dt = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<KoopmanDecomposition> bad_dt = KoopmanDecomposition::Fit(s, o);
  EXPECT_EQ(bad_dt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_dt.status().message().find("dt is 0"), std::string::npos) << bad_dt.status();
  o.dt = 1;
  o.top = 0;
  EXPECT_NE(KoopmanDecomposition::Fit(s, o).status().message().find("top is 0"), std::string::npos);
}

}  // namespace
}  // namespace cmestream
