// Held-out VAMP-2 bandwidth selection (see bandwidth.h).
#include "core/cme/bandwidth.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/kernels/gaussian.h"

namespace cmestream {
namespace {

// Symmetric inverse square root with eigenvalues floored at floor (they are covariances).
MatrixXd InvSqrt(const MatrixXd& c, double floor) {
  Eigen::SelfAdjointEigenSolver<MatrixXd> es(c);
  const VectorXd ev = es.eigenvalues().cwiseMax(floor).cwiseSqrt().cwiseInverse();
  return es.eigenvectors() * ev.asDiagonal() * es.eigenvectors().transpose();
}

RowMatrixXd Rows(const Eigen::Ref<const RowMatrixXd>& a, const std::vector<Eigen::Index>& idx) {
  RowMatrixXd out(idx.size(), a.cols());
  for (size_t i = 0; i < idx.size(); ++i) out.row(i) = a.row(idx[i]);
  return out;
}

}  // namespace

double MedianPairwiseDistance(const Eigen::Ref<const RowMatrixXd>& x, int max_points) {
  const Eigen::Index n = std::min<Eigen::Index>(x.rows(), max_points);
  std::vector<double> d;
  d.reserve(n * (n - 1) / 2);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = i + 1; j < n; ++j) d.push_back((x.row(i) - x.row(j)).norm());
  if (d.empty()) return 1.0;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return d[d.size() / 2];
}

double HeldOutVamp2(const Eigen::Ref<const RowMatrixXd>& x_train, const Eigen::Ref<const RowMatrixXd>& y_train,
                    const Eigen::Ref<const RowMatrixXd>& x_test, const Eigen::Ref<const RowMatrixXd>& y_test,
                    const Eigen::Ref<const RowMatrixXd>& landmarks, double sigma, int rank, double ridge) {
  // Features: Nystrom basis f(z) = k(z, landmarks), mean-free (the constant function is the
  // trivial singular function with value 1 and is added back at the end).
  MatrixXd fx = GaussianGram(x_train, landmarks, sigma);
  MatrixXd fy = GaussianGram(y_train, landmarks, sigma);
  const Eigen::RowVectorXd mx = fx.colwise().mean(), my = fy.colwise().mean();
  fx.rowwise() -= mx;
  fy.rowwise() -= my;
  const double n = static_cast<double>(fx.rows());
  const int p = static_cast<int>(fx.cols());
  MatrixXd c00 = fx.transpose() * fx / n, c11 = fy.transpose() * fy / n;
  const MatrixXd c01 = fx.transpose() * fy / n;
  // Ridge relative to the mean eigenvalue: Gaussian Nystrom features are nearly collinear.
  const double r0 = ridge * c00.trace() / p, r1 = ridge * c11.trace() / p;
  c00.diagonal().array() += r0;
  c11.diagonal().array() += r1;
  const MatrixXd i0 = InvSqrt(c00, r0), i1 = InvSqrt(c11, r1);
  Eigen::JacobiSVD<MatrixXd> svd(i0 * c01 * i1, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const int r = std::min(rank, p);
  const MatrixXd a = i0 * svd.matrixU().leftCols(r);
  const MatrixXd b = i1 * svd.matrixV().leftCols(r);
  // Held-out score (Wu & Noe 2020): the fitted singular functions re-whitened on the test half.
  MatrixXd gx = GaussianGram(x_test, landmarks, sigma);
  MatrixXd gy = GaussianGram(y_test, landmarks, sigma);
  gx.rowwise() -= mx;
  gy.rowwise() -= my;
  const MatrixXd u = gx * a, v = gy * b;
  const double nt = static_cast<double>(u.rows());
  const MatrixXd s00 = u.transpose() * u / nt, s11 = v.transpose() * v / nt, s01 = u.transpose() * v / nt;
  const double floor = 1e-10;
  const MatrixXd t = InvSqrt(s00, floor) * s01 * InvSqrt(s11, floor);
  return 1.0 + t.squaredNorm();
}

BandwidthSelection SelectBandwidth(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y,
                                   const BandwidthSelectionOptions& options) {
  BandwidthSelection out;
  const Eigen::Index n = x.rows();
  std::vector<Eigen::Index> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(idx.begin(), idx.end(), rng);
  const RowMatrixXd xs = Rows(x, idx), ys = Rows(y, idx);
  out.median_distance = MedianPairwiseDistance(xs, options.median_points);
  const Eigen::Index half = n / 2;
  const RowMatrixXd x_train = xs.topRows(half), y_train = ys.topRows(half);
  const RowMatrixXd x_test = xs.bottomRows(n - half), y_test = ys.bottomRows(n - half);
  const Eigen::Index p = std::min<Eigen::Index>(options.landmarks, half);
  const RowMatrixXd landmarks = x_train.topRows(p);
  double best = -1;
  for (double f : options.median_fractions) {
    const double sigma = f * out.median_distance;
    const double score = HeldOutVamp2(x_train, y_train, x_test, y_test, landmarks, sigma, options.rank, options.ridge);
    out.candidates.push_back(sigma);
    out.scores.push_back(score);
    if (score > best) {
      best = score;
      out.chosen = sigma;
    }
  }
  return out;
}

}  // namespace cmestream
