// CompressedCme against explicit operator algebra (docs/algorithms.md §1).
//
// Operators A = sum_ij C_ij phi(y_i) (x) phi(x_j) are compared through exact Gram-matrix
// identities: <A, B>_HS = tr(C_A^T K_{Y_A Y_B} C_B K_{X_B X_A}), so ||A||_HS^2 = tr(C^T G_Y C G_X).
// These are exact for any kernel, so they give ground truth without truncated feature maps.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/cme/compressed_cme.h"
#include "core/kernels/gaussian.h"
#include "core/systems/duffing.h"

namespace cmestream {
namespace {

// An operator in kernel form over explicit atoms.
struct KernelOperator {
  RowMatrixXd y, x;  // atoms
  MatrixXd c;        // y.rows() x x.rows()
};

RowMatrixXd VStack(const RowMatrixXd& a, const RowMatrixXd& b) {
  RowMatrixXd s(a.rows() + b.rows(), std::max(a.cols(), b.cols()));
  if (a.rows()) s.topRows(a.rows()) = a;
  if (b.rows()) s.bottomRows(b.rows()) = b;
  return s;
}

double HsInner(const KernelOperator& a, const KernelOperator& b, double sigma) {
  if (a.c.size() == 0 || b.c.size() == 0) return 0;
  const MatrixXd kyy = GaussianGram(a.y, b.y, sigma);
  const MatrixXd kxx = GaussianGram(b.x, a.x, sigma);
  return (a.c.transpose() * kyy * b.c * kxx).trace();
}

double HsDistance(const KernelOperator& a, const KernelOperator& b, double sigma) {
  const double d2 = HsInner(a, a, sigma) - 2 * HsInner(a, b, sigma) + HsInner(b, b, sigma);
  return std::sqrt(std::max(0.0, d2));
}

double HsNorm(const KernelOperator& a, double sigma) { return std::sqrt(std::max(0.0, HsInner(a, a, sigma))); }

KernelOperator FromLearner(const CompressedCme& cme) { return {cme.y_atoms(), cme.x_atoms(), cme.W()}; }

// The uncompressed SGD iterate C~ = (1 - eta lambda) C - eta (C phi(x) - phi(y)) (x) phi(x) on the
// atoms [Y; y], [X; x].
KernelOperator UncompressedIterate(const KernelOperator& c, const double* x, const double* y, int d, double eta,
                                   double lambda, double sigma) {
  const int my = c.y.rows(), mx = c.x.rows();
  KernelOperator out;
  out.y = VStack(c.y, Eigen::Map<const RowMatrixXd>(y, 1, d));
  out.x = VStack(c.x, Eigen::Map<const RowMatrixXd>(x, 1, d));
  out.c = MatrixXd::Zero(my + 1, mx + 1);
  out.c.topLeftCorner(my, mx) = (1 - eta * lambda) * c.c;
  const VectorXd kx = GaussianGram(c.x, Eigen::Map<const RowMatrixXd>(x, 1, d), sigma);
  if (mx > 0) out.c.col(mx).head(my) = -eta * (c.c * kx);
  out.c(my, mx) = eta;
  return out;
}

// Orthogonal projection of A onto span{phi(ty_i) (x) phi(tx_j)}: P_Y A P_X with exact inverses.
KernelOperator Project(const KernelOperator& a, const RowMatrixXd& ty, const RowMatrixXd& tx, double sigma) {
  const MatrixXd gy = GaussianGram(ty, ty, sigma), gx = GaussianGram(tx, tx, sigma);
  const MatrixXd ky = GaussianGram(ty, a.y, sigma), kx = GaussianGram(a.x, tx, sigma);
  const MatrixXd b = gy.ldlt().solve(ky * a.c * kx);
  return {ty, tx, gx.ldlt().solve(b.transpose()).transpose()};
}

CompressedCme::Options ExactOptions(bool one_sided, double epsilon, int max_dict) {
  CompressedCme::Options o;
  o.dim = 2;
  o.sigma = 0.7;
  o.eta = 0.3;
  o.lambda = 0.05;
  o.epsilon = epsilon;
  o.max_dict = max_dict;
  o.one_sided = one_sided;
  o.jitter = 1e-12;  // near-exact projections, so the algebra can be checked to ~1e-7
  return o;
}

RowMatrixXd Uniform(int n, int d, uint64_t seed, double box = 1.5) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-box, box);
  RowMatrixXd m(n, d);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) m(i, j) = u(rng);
  return m;
}

// Every step: (1) last_error() equals ||C~ - Pi C~||_HS computed explicitly; (2) the new W is
// the explicit projection of C~ onto the span of the new dictionary (for compress: the old span;
// for an admission: the enlarged span, which for "both" contains C~, i.e. W is the iterate itself).
void CheckEveryStepAgainstExplicitAlgebra(bool one_sided, double epsilon, int max_dict, int n) {
  const CompressedCme::Options o = ExactOptions(one_sided, epsilon, max_dict);
  CompressedCme cme(o);
  const RowMatrixXd x = Uniform(n, 2, 1), y = Uniform(n, 2, 2);
  int seen[6] = {0, 0, 0, 0, 0, 0};
  for (int t = 0; t < n; ++t) {
    const KernelOperator before = FromLearner(cme);
    const KernelOperator tilde =
        UncompressedIterate(before, x.row(t).data(), y.row(t).data(), 2, o.eta, o.lambda, o.sigma);
    cme.Observe(x.row(t).data(), y.row(t).data());
    ++seen[static_cast<int>(cme.last_step())];
    const double scale = HsNorm(tilde, o.sigma);
    if (t > 0) {
      const KernelOperator proj_old = Project(tilde, before.y, before.x, o.sigma);
      const double explicit_err = HsDistance(tilde, proj_old, o.sigma);
      EXPECT_NEAR(cme.last_error(), explicit_err, 1e-6 * scale + 1e-9) << "t=" << t;
    }
    const KernelOperator now = FromLearner(cme);
    const KernelOperator proj_new = Project(tilde, now.y, now.x, o.sigma);
    ASSERT_EQ(now.c.rows(), proj_new.c.rows());
    ASSERT_EQ(now.c.cols(), proj_new.c.cols());
    EXPECT_LE(HsDistance(now, proj_new, o.sigma), 1e-6 * scale) << "t=" << t;
    if (cme.last_step() == CompressedCme::Step::kAdmittedBoth) {
      EXPECT_LE(HsDistance(now, tilde, o.sigma), 1e-6 * scale) << "admit = uncompressed iterate, t=" << t;
    }
    // The step keeps the error within budget unless it was forced.
    if (cme.last_step() != CompressedCme::Step::kForced) {
      EXPECT_LE(HsDistance(now, tilde, o.sigma), epsilon + 1e-6 * scale) << "t=" << t;
    }
  }
  std::printf("one_sided=%d eps=%g cap=%d: compressed %d, +x %d, +y %d, +both %d, forced %d; m_x=%d m_y=%d\n",
              one_sided, epsilon, max_dict, seen[1], seen[2], seen[3], seen[4], seen[5], cme.dict_x_size(),
              cme.dict_y_size());
  EXPECT_EQ(cme.counters().samples, n);
  EXPECT_EQ(cme.counters().compressed, seen[1]);
  EXPECT_EQ(cme.counters().forced, seen[5]);
  EXPECT_EQ(cme.counters().admitted_x, seen[2] + seen[4]);
  EXPECT_EQ(cme.counters().admitted_y, seen[3] + seen[4]);
}

TEST(CompressedCme, OneSidedStepsEqualExplicitProjections) {
  CheckEveryStepAgainstExplicitAlgebra(/*one_sided=*/true, /*epsilon=*/0.02, /*max_dict=*/200, /*n=*/120);
}

TEST(CompressedCme, PairedStepsEqualExplicitProjections) {
  CheckEveryStepAgainstExplicitAlgebra(/*one_sided=*/false, /*epsilon=*/0.02, /*max_dict=*/200, /*n=*/120);
}

TEST(CompressedCme, ForcedProjectionsAtTheCapAreCountedAndExact) {
  CheckEveryStepAgainstExplicitAlgebra(/*one_sided=*/true, /*epsilon=*/1e-4, /*max_dict=*/8, /*n=*/60);
  CheckEveryStepAgainstExplicitAlgebra(/*one_sided=*/false, /*epsilon=*/1e-4, /*max_dict=*/8, /*n=*/60);
  CompressedCme cme(ExactOptions(true, 1e-4, 8));
  const RowMatrixXd x = Uniform(60, 2, 1), y = Uniform(60, 2, 2);
  cme.ObserveBatch(x, y);
  EXPECT_EQ(cme.dict_x_size(), 8);
  EXPECT_EQ(cme.dict_y_size(), 8);
  EXPECT_GT(cme.counters().forced, 40);
  EXPECT_GT(cme.counters().forced_error_sum, 0.0);
}

TEST(CompressedCme, FirstSampleAdmitsEvenWithAHugeBudget) {
  CompressedCme::Options o = ExactOptions(true, 100.0, 10);
  CompressedCme cme(o);
  const double x[2] = {0.1, 0.2}, y[2] = {0.3, -0.1};
  cme.Observe(x, y);
  EXPECT_EQ(cme.last_step(), CompressedCme::Step::kAdmittedBoth);
  ASSERT_EQ(cme.W().rows(), 1);
  EXPECT_DOUBLE_EQ(cme.W()(0, 0), o.eta);
  cme.Observe(y, x);
  EXPECT_EQ(cme.last_step(), CompressedCme::Step::kCompressed);
}

// The O(m^2) Schur-complement updates give the same inverse as a direct inversion.
TEST(CompressedCme, BlockInverseEqualsDirectInverse) {
  CompressedCme::Options o;
  o.dim = 2;
  o.epsilon = 1e-3;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(3000, 3);
  cme.ObserveBatch(data.x, data.y);
  ASSERT_GT(cme.dict_x_size(), 50);
  for (int side = 0; side < 2; ++side) {
    const RowMatrixXd atoms = side == 0 ? RowMatrixXd(cme.x_atoms()) : RowMatrixXd(cme.y_atoms());
    MatrixXd g = GaussianGram(atoms, atoms, o.sigma);
    g.diagonal().array() += o.jitter;
    const MatrixXd direct = g.inverse();
    const MatrixXd updated = side == 0 ? MatrixXd(cme.gram_x_inverse()) : MatrixXd(cme.gram_y_inverse());
    const double rel = (updated - direct).norm() / direct.norm();
    std::printf("side %d: m=%d, relative difference %.3g\n", side, static_cast<int>(atoms.rows()), rel);
    // Gaussian Grams with jitter 1e-6 have condition numbers up to ~1e6, so recursive updates
    // agree with a direct inverse to ~kappa * 1e-12; 1e-4 leaves margin and still catches any
    // algebra error (those give O(1) differences).
    EXPECT_LT(rel, 1e-4);
  }
  const double drift = cme.MeasureInverseDrift();
  EXPECT_LT(drift, 0.05);
  cme.Refactorize();
  EXPECT_LT(cme.MeasureInverseDrift(), std::max(1e-6, 0.1 * drift));
  EXPECT_EQ(cme.counters().refactorizations, 1);
}

// Naive O(n^2) kernel-form recursion of the base SGD step, one atom pair per sample.
KernelOperator NaiveSgd(const RowMatrixXd& x, const RowMatrixXd& y, double sigma, double lambda,
                        const std::vector<double>& etas) {
  const int n = x.rows();
  const MatrixXd kxx = GaussianGram(x, x, sigma);
  MatrixXd a = MatrixXd::Zero(n, n);
  for (int t = 0; t < n; ++t) {
    // C phi(x_t) = sum_i (sum_j A_ij k(x_j, x_t)) phi(y_i)
    const VectorXd alpha = a.topLeftCorner(t, t) * kxx.col(t).head(t);
    a.topLeftCorner(t, t) *= 1 - etas[t] * lambda;
    a.col(t).head(t) = -etas[t] * alpha;
    a(t, t) = etas[t];
  }
  return {y, x, a};
}

void CheckEpsilonZeroIsBaseSgd(bool one_sided, double decay_samples) {
  const int n = 50;
  CompressedCme::Options o;
  o.dim = 2;
  o.sigma = 0.5;
  o.eta = 0.2;
  o.lambda = 0.01;
  o.epsilon = 0;
  o.max_dict = 100;
  o.one_sided = one_sided;
  o.step_decay_samples = decay_samples;
  const RowMatrixXd x = Uniform(n, 2, 5), y = Uniform(n, 2, 6);
  CompressedCme cme(o);
  cme.ObserveBatch(x, y);
  EXPECT_EQ(cme.dict_x_size(), n);
  std::vector<double> etas(n);
  for (int t = 0; t < n; ++t)
    etas[t] = decay_samples > 0 ? o.eta / std::pow(1.0 + t / decay_samples, o.step_decay_power) : o.eta;
  const KernelOperator naive = NaiveSgd(x, y, o.sigma, o.lambda, etas);
  const double dist = HsDistance(FromLearner(cme), naive, o.sigma);
  const double norm = HsNorm(naive, o.sigma);
  std::printf("eps=0 one_sided=%d decay=%g: ||C - C_sgd||_HS = %.3g (||C_sgd|| = %.3g)\n", one_sided, decay_samples,
              dist, norm);
  EXPECT_LT(dist, 1e-6 * norm);
  EXPECT_GT(norm, 0.1);
}

TEST(CompressedCme, EpsilonZeroIsExactlyTheBaseSgd) {
  CheckEpsilonZeroIsBaseSgd(true, 0);
  CheckEpsilonZeroIsBaseSgd(false, 0);
  CheckEpsilonZeroIsBaseSgd(true, 10.0);  // decaying step schedule
}

// Streaming pairs drawn uniformly from a fixed sample of N pairs, SGD minimizes the empirical
// regularized risk whose closed-form minimizer is C* = Psi (K_X + N lambda I)^{-1} Phi^T. With
// Polyak-Ruppert averaging the distance to C* must shrink as n grows.
TEST(CompressedCme, ApproachesBatchRegularizedCme) {
  const int big_n = 20;
  const auto data = systems::SimulateDuffing(big_n, 9);
  CompressedCme::Options o;
  o.dim = 2;
  o.sigma = 0.8;
  o.eta = 0.5;
  o.lambda = 0.05;
  o.epsilon = 1e-2;
  o.averaging = true;
  CompressedCme cme(o);
  MatrixXd k = GaussianGram(data.x, data.x, o.sigma);
  k.diagonal().array() += big_n * o.lambda;
  const KernelOperator batch{data.y, data.x, k.inverse()};
  const double norm = HsNorm(batch, o.sigma);
  std::mt19937_64 rng(4);
  std::uniform_int_distribution<int> pick(0, big_n - 1);
  std::vector<double> dists;
  int64_t seen = 0;
  for (int64_t checkpoint : {250, 1000, 4000, 16000, 64000}) {
    for (; seen < checkpoint; ++seen) {
      const int i = pick(rng);
      cme.Observe(data.x.row(i).data(), data.y.row(i).data());
    }
    dists.push_back(HsDistance(FromLearner(cme), batch, o.sigma) / norm);
    std::printf("n=%ld: relative HS distance to batch CME %.4g (m_x=%d)\n", static_cast<long>(checkpoint), dists.back(),
                cme.dict_x_size());
  }
  for (size_t i = 1; i < dists.size(); ++i) EXPECT_LT(dists[i], dists[i - 1]);
  EXPECT_LT(dists.back(), 0.05);
  EXPECT_LE(cme.dict_x_size(), big_n);
}

TEST(CompressedCme, AveragingIsTheRunningMeanOfPaddedIterates) {
  CompressedCme::Options o = ExactOptions(true, 0.02, 100);
  o.averaging = true;
  CompressedCme cme(o);
  const RowMatrixXd x = Uniform(40, 2, 7), y = Uniform(40, 2, 8);
  MatrixXd sum = MatrixXd::Zero(100, 100);
  for (int t = 0; t < 40; ++t) {
    cme.Observe(x.row(t).data(), y.row(t).data());
    sum.topLeftCorner(cme.dict_y_size(), cme.dict_x_size()) += cme.W_iterate();
  }
  const MatrixXd mean = sum.topLeftCorner(cme.dict_y_size(), cme.dict_x_size()) / 40.0;
  EXPECT_LT((MatrixXd(cme.W()) - mean).norm(), 1e-12 * (1 + mean.norm()));
  EXPECT_GT((MatrixXd(cme.W()) - MatrixXd(cme.W_iterate())).norm(), 1e-3);
}

TEST(CompressedCme, NearestAtomsMatchBruteForce) {
  CompressedCme::Options o;
  o.dim = 2;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(400, 12);
  for (int t = 0; t < 400; ++t) {
    cme.Observe(data.x.row(t).data(), data.y.row(t).data());
    const RowMatrixXd atoms = cme.x_atoms();
    Eigen::Index ix, iy;
    (atoms.rowwise() - data.x.row(t)).rowwise().squaredNorm().minCoeff(&ix);
    (atoms.rowwise() - data.y.row(t)).rowwise().squaredNorm().minCoeff(&iy);
    ASSERT_EQ(cme.last_nearest_x(), ix) << t;
    ASSERT_EQ(cme.last_nearest_y_in_x(), iy) << t;
  }
}

TEST(CompressedCme, PredictConditionalMeanTracksTheFlow) {
  CompressedCme::Options o;
  o.dim = 2;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(10000, 13);
  cme.ObserveBatch(data.x, data.y);
  const auto test = systems::SimulateDuffing(200, 14);
  const RowMatrixXd pred = PredictConditionalMean(CmeSnapshot::From(cme), test.x);
  // Interior points only (the box edge has no data beyond it).
  double se = 0, base = 0;
  int cnt = 0;
  for (int i = 0; i < 200; ++i) {
    if (test.x.row(i).cwiseAbs().maxCoeff() > 1.5) continue;
    se += (pred.row(i) - test.y.row(i)).squaredNorm();
    base += (test.x.row(i) - test.y.row(i)).squaredNorm();
    ++cnt;
  }
  std::printf("one-step forecast RMSE %.4f vs persistence %.4f (%d points)\n", std::sqrt(se / cnt),
              std::sqrt(base / cnt), cnt);
  EXPECT_LT(se, 0.25 * base);
}

TEST(CompressedCmeOptions, ValidateNamesTheViolatedConstraint) {
  CompressedCme::Options o;
  EXPECT_FALSE(o.Validate().ok());  // dim = 0
  o.dim = 2;
  EXPECT_TRUE(o.Validate().ok());
  o.sigma = -1;
  EXPECT_NE(o.Validate().message().find("sigma"), std::string::npos);
  o.sigma = 0.4;
  o.eta = 10;
  o.lambda = 0.2;
  EXPECT_NE(o.Validate().message().find("eta * lambda"), std::string::npos);
  o.eta = 0.1;
  o.epsilon = -1;
  EXPECT_NE(o.Validate().message().find("epsilon"), std::string::npos);
  o.epsilon = 1e-3;
  o.max_dict = 0;
  EXPECT_NE(o.Validate().message().find("max_dict"), std::string::npos);
}

}  // namespace
}  // namespace cmestream
