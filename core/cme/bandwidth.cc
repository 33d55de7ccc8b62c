// Held-out VAMP-2 bandwidth selection (see bandwidth.h).
#include "core/cme/bandwidth.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"

#include "core/cme/compressed_cme.h"
#include "core/kernels/gaussian.h"
#include "core/linalg/symmetric.h"

namespace cmestream {
namespace {

RowMatrixXd Rows(const Eigen::Ref<const RowMatrixXd>& a, const std::vector<Eigen::Index>& idx) {
  RowMatrixXd out(idx.size(), a.cols());
  for (size_t i = 0; i < idx.size(); ++i) out.row(i) = a.row(idx[i]);
  return out;
}

// One value per row (docs/algorithms.md §1.11.2): the same distances as the general rule,
// |x_i - x_j| computed as (x_i - x_j).norm() computes it, sqrt((x_i - x_j)^2), and the same
// order statistic, found in O(m log m + 64 m) instead of O(m^2): sort, then bisect on the bit
// pattern of the answer (non-negative doubles order as their bits) with the count of the pairs
// within t. The count is exact and monotone in t, so the smallest t with count >= k is the k-th
// smallest distance itself, bit for bit.
MedianDistance ScalarMedianNonzeroDistance(const Eigen::Ref<const RowMatrixXd>& x, Eigen::Index n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i) v[static_cast<size_t>(i)] = x(i, 0);
  std::sort(v.begin(), v.end());
  // sqrt(fl(v_j - v_i)^2) is non-decreasing in v_j and non-increasing in v_i (rounding is
  // monotone), so two pointers count the pairs within t.
  const auto dist = [&](Eigen::Index i, Eigen::Index j) {
    const double d = v[j] - v[i];
    return std::sqrt(d * d);
  };
  const auto pairs_within = [&](double t) {
    int64_t count = 0;
    Eigen::Index i = 0;
    for (Eigen::Index j = 1; j < n; ++j) {
      while (dist(i, j) > t) ++i;
      count += j - i;
    }
    return count;
  };
  const int64_t pairs = static_cast<int64_t>(n) * (n - 1) / 2;
  const int64_t equal = pairs_within(0.0);
  const int64_t nonzero = pairs - equal;
  if (nonzero == 0) return {0.0, 1.0};
  // The general rule takes element nonzero / 2 (0-based) of the nonzero distances: the
  // (equal + nonzero / 2 + 1)-th smallest of all the pairs.
  const int64_t target = equal + nonzero / 2 + 1;
  uint64_t lo = 0;                      // bits of 0: pairs_within(0) = equal < target
  uint64_t hi = 0x7FF0000000000000ULL;  // bits of +inf: every pair
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (pairs_within(absl::bit_cast<double>(mid)) >= target) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return {absl::bit_cast<double>(hi), static_cast<double>(equal) / static_cast<double>(pairs)};
}

}  // namespace

HeldOutSplit BlockSplit(Eigen::Index n, int blocks) {
  // Contiguous blocks, alternating train/test: pairs from one trajectory are correlated over its
  // relaxation time, so a shuffled split puts near-copies of the training pairs into the test
  // half and the score cannot see over-fitting (it leaks).
  const Eigen::Index b = std::max<Eigen::Index>(2, std::min<Eigen::Index>(blocks, n / 2));
  HeldOutSplit split;
  for (Eigen::Index t = 0; t < n; ++t) ((t * b / n) % 2 == 0 ? split.train : split.test).push_back(t);
  return split;
}

MedianDistance WarmupMedian(const Eigen::Ref<const RowMatrixXd>& x, const BandwidthSelectionOptions& options) {
  // Evenly strided points (not the first ones: in-order data would give the region the
  // trajectory started in).
  const Eigen::Index n = x.rows();
  std::vector<Eigen::Index> strided;
  const Eigen::Index mp = std::min<Eigen::Index>(n, options.median_points);
  for (Eigen::Index i = 0; i < mp; ++i) strided.push_back(i * n / mp);
  return MedianNonzeroDistance(Rows(x, strided), options.median_points);
}

// The general rule: p training points evenly strided in stream order.
RowMatrixXd StridedLandmarks(const Eigen::Ref<const RowMatrixXd>& x_train, Eigen::Index p) {
  const Eigen::Index nt = x_train.rows();
  std::vector<Eigen::Index> picks;
  for (Eigen::Index i = 0; i < p; ++i) picks.push_back(i * nt / p);
  return Rows(x_train, picks);
}

// One value per row (docs/algorithms.md §1.11.2): the training values at p evenly spaced ranks
// (the smallest and the largest among them), repeated values once. They follow the values'
// distribution, where strided picks of a trajectory follow time, so fewer cover it.
RowMatrixXd ScalarLandmarks(const Eigen::Ref<const RowMatrixXd>& x_train, int max_landmarks) {
  const Eigen::Index nt = x_train.rows();
  std::vector<double> v(static_cast<size_t>(nt));
  for (Eigen::Index i = 0; i < nt; ++i) v[static_cast<size_t>(i)] = x_train(i, 0);
  std::sort(v.begin(), v.end());
  const Eigen::Index p = std::min<Eigen::Index>(max_landmarks, nt);
  std::vector<double> picks;
  for (Eigen::Index i = 0; i < p; ++i) {
    // Rank round(i (nt - 1) / (p - 1)): 0 and nt - 1 at the ends.
    const double value = v[static_cast<size_t>(p == 1 ? 0 : (i * (nt - 1) + (p - 1) / 2) / (p - 1))];
    if (picks.empty() || value != picks.back()) picks.push_back(value);
  }
  return Eigen::Map<const RowMatrixXd>(picks.data(), static_cast<Eigen::Index>(picks.size()), 1);
}

MedianDistance MedianNonzeroDistance(const Eigen::Ref<const RowMatrixXd>& x, int max_points) {
  const Eigen::Index n = std::min<Eigen::Index>(x.rows(), max_points);
  if (n < 2) return {1.0, 0.0};
  if (x.cols() == 1) return ScalarMedianNonzeroDistance(x, n);
  std::vector<double> d;
  d.reserve(n * (n - 1) / 2);
  int64_t pairs = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = i + 1; j < n; ++j) {
      ++pairs;
      // Rows within the daemon's value bound (|v| <= 1e150) do not overflow; an infinite median
      // (larger values, in core use) is degenerate like a zero one (SelectBandwidth).
      const double dist = (x.row(i) - x.row(j)).norm();
      if (dist > 0) d.push_back(dist);
    }
  }
  const double equal = static_cast<double>(pairs - static_cast<int64_t>(d.size())) / static_cast<double>(pairs);
  if (d.empty()) return {0.0, 1.0};
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return {d[d.size() / 2], equal};
}

double MedianPairwiseDistance(const Eigen::Ref<const RowMatrixXd>& x, int max_points) {
  return MedianNonzeroDistance(x, max_points).median;
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
  // Features constant over the training half (every point in one place at this bandwidth): the
  // constant function is the only singular function, and its score is 1 (§1.11.1).
  if (!(r0 > 0) || !(r1 > 0)) return 1.0;
  c00.diagonal().array() += r0;
  c11.diagonal().array() += r1;
  const MatrixXd i0 = InverseSqrtPsd(c00, r0), i1 = InverseSqrtPsd(c11, r1);
  // Divide and conquer (BDCSVD), not one-sided Jacobi: the same singular vectors to rounding, and
  // at p = 200 landmarks Jacobi's sweeps were 83 % of a fleet's CPU while models warmed up
  // (docs/benchmarks.md "Fleets").
  Eigen::BDCSVD<MatrixXd> svd(i0 * c01 * i1, Eigen::ComputeThinU | Eigen::ComputeThinV);
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
  const HeldOutSplit split = BlockSplit(x.rows(), options.blocks);
  const std::vector<Eigen::Index>&train = split.train, &test = split.test;
  const MedianDistance median = WarmupMedian(x, options);
  out.median_distance = median.median;
  if (!(median.median > 0) || !std::isfinite(median.median)) {
    // One distinct point (a flat line, a stuck sensor): no length scale to learn. 1 is one unit
    // of the scaled channels (a constant channel is scaled by 1, §1.13): a later move by about
    // that much is a new state.
    out.chosen = 1.0;
    out.note = median.median > 0
                   ? "the warm-up's distances overflow: sigma 1 on the scaled channels, no candidate scored"
                   : "the warm-up is constant (one distinct state): sigma 1 on the scaled channels, "
                     "no candidate scored";
    return out;
  }
  if (median.equal_fraction > 0) {
    out.note = absl::StrCat("bandwidth from the nonzero distances (", std::lround(100 * median.equal_fraction),
                            " % of the warm-up's pairwise distances are 0)");
  }
  const RowMatrixXd x_train = Rows(x, train), y_train = Rows(y, train);
  const RowMatrixXd x_test = Rows(x, test), y_test = Rows(y, test);
  const Eigen::Index nt = static_cast<Eigen::Index>(train.size());
  const RowMatrixXd landmarks = x.cols() == 1 && options.scalar_landmarks > 0
                                    ? ScalarLandmarks(x_train, options.scalar_landmarks)
                                    : StridedLandmarks(x_train, std::min<Eigen::Index>(options.landmarks, nt));
  double best = -1;
  for (double f : options.median_fractions) {
    const double sigma = f * out.median_distance;
    const double score = HeldOutVamp2(x_train, y_train, x_test, y_test, landmarks, sigma, options.rank, options.ridge);
    out.candidates.push_back(sigma);
    out.scores.push_back(score);
    // A score that is not finite (degenerate covariances) never wins.
    if (std::isfinite(score) && score > best) {
      best = score;
      out.chosen = sigma;
    }
  }
  if (!(out.chosen > 0) || !std::isfinite(out.chosen)) {
    out.chosen = out.median_distance;
    out.note = absl::StrCat(out.note, out.note.empty() ? "" : "; ",
                            "no candidate bandwidth scored: sigma = the median distance");
  }
  if (out.chosen < CompressedCme::kMinSigma || out.chosen > CompressedCme::kMaxSigma) {
    // Distances beyond what a kernel can represent (about 1e-150 or 1e150 on the scaled
    // channels): the nearest bandwidth that can.
    out.chosen = std::clamp(out.chosen, CompressedCme::kMinSigma, CompressedCme::kMaxSigma);
    out.note = absl::StrCat(out.note, out.note.empty() ? "" : "; ", "sigma clamped to ", out.chosen);
  }
  return out;
}

}  // namespace cmestream
