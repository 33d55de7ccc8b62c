// Held-out VAMP-2 bandwidth selection (see bandwidth.h).
#include "core/cme/bandwidth.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/kernels/gaussian.h"
#include "core/linalg/symmetric.h"

namespace cmestream {
namespace {

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
  const MatrixXd i0 = InverseSqrtPsd(c00, r0), i1 = InverseSqrtPsd(c11, r1);
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
  const MatrixXd t = InverseSqrtPsd(s00, floor) * s01 * InverseSqrtPsd(s11, floor);
  return 1.0 + t.squaredNorm();
}

BandwidthSelection SelectBandwidth(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y,
                                   const BandwidthSelectionOptions& options) {
  BandwidthSelection out;
  const Eigen::Index n = x.rows();
  // Held-out split by contiguous blocks, alternating train/test: pairs from one trajectory are
  // correlated over its relaxation time, so a shuffled split puts near-copies of the training
  // pairs into the test half and the score cannot see over-fitting (it leaks).
  const Eigen::Index blocks = std::max<Eigen::Index>(2, std::min<Eigen::Index>(options.blocks, n / 2));
  std::vector<Eigen::Index> train, test;
  for (Eigen::Index t = 0; t < n; ++t) ((t * blocks / n) % 2 == 0 ? train : test).push_back(t);
  // Median and landmarks from evenly strided points (not the first ones: in-order data would
  // give the region the trajectory started in).
  std::vector<Eigen::Index> strided;
  const Eigen::Index mp = std::min<Eigen::Index>(n, options.median_points);
  for (Eigen::Index i = 0; i < mp; ++i) strided.push_back(i * n / mp);
  out.median_distance = MedianPairwiseDistance(Rows(x, strided), options.median_points);
  const RowMatrixXd x_train = Rows(x, train), y_train = Rows(y, train);
  const RowMatrixXd x_test = Rows(x, test), y_test = Rows(y, test);
  const Eigen::Index nt = static_cast<Eigen::Index>(train.size());
  const Eigen::Index p = std::min<Eigen::Index>(options.landmarks, nt);
  std::vector<Eigen::Index> picks;
  for (Eigen::Index i = 0; i < p; ++i) picks.push_back(i * nt / p);
  const RowMatrixXd landmarks = Rows(x_train, picks);
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
