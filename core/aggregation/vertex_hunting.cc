#include "core/aggregation/vertex_hunting.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/common/splitmix.h"

namespace cmestream::internal {
namespace {

// Index i with prefix weight crossing u * total (weights >= 0, total > 0).
int SampleIndex(const VectorXd& w, double u) {
  const double target = u * w.sum();
  double acc = 0;
  for (int i = 0; i < w.size(); ++i) {
    acc += w(i);
    if (acc > target) return i;
  }
  return static_cast<int>(w.size()) - 1;
}

}  // namespace

std::vector<int> SuccessiveProjection(const Eigen::Ref<const MatrixXd>& d, int r) {
  const int64_t p = d.rows();
  MatrixXd y(p, d.cols() + 1);
  y.col(0).setOnes();
  y.rightCols(d.cols()) = d;
  std::vector<int> chosen;
  chosen.reserve(r);
  std::vector<char> used(p, 0);
  for (int k = 0; k < r; ++k) {
    VectorXd norms = y.rowwise().squaredNorm();
    int best = -1;
    double best_norm = -1;
    for (int64_t j = 0; j < p; ++j) {
      // Already chosen rows have zero residual in exact arithmetic; skipping them guarantees
      // distinct indices even when the remaining rows are (numerically) in their span.
      if (!used[j] && norms(j) > best_norm) {
        best_norm = norms(j);
        best = static_cast<int>(j);
      }
    }
    chosen.push_back(best);
    used[best] = 1;
    const VectorXd u = y.row(best).transpose();
    const double un = u.squaredNorm();
    if (un > 0) y -= (y * u / un) * u.transpose();  // project rows onto u's complement
  }
  return chosen;
}

MatrixXd KMeansCenters(const Eigen::Ref<const MatrixXd>& points, int centers, int restarts, int max_iterations,
                       uint64_t seed) {
  const int64_t p = points.rows();
  const int kc = static_cast<int>(std::min<int64_t>(centers, p));
  SplitMix rng(seed);
  MatrixXd best_c;
  double best_inertia = std::numeric_limits<double>::infinity();
  Eigen::VectorXi label(p);
  VectorXd dist(p);
  for (int rep = 0; rep < restarts; ++rep) {
    // k-means++ seeding: next center drawn with probability proportional to squared distance.
    MatrixXd c(kc, points.cols());
    c.row(0) = points.row(static_cast<int64_t>(rng.Uniform() * p) % p);
    dist = (points.rowwise() - c.row(0)).rowwise().squaredNorm();
    for (int k = 1; k < kc; ++k) {
      const int idx = dist.sum() > 0 ? SampleIndex(dist, rng.Uniform()) : k;
      c.row(k) = points.row(idx);
      dist = dist.cwiseMin((points.rowwise() - c.row(k)).rowwise().squaredNorm());
    }
    label.setConstant(-1);
    double inertia = 0;
    for (int it = 0; it < max_iterations; ++it) {
      bool changed = it == 0;
      inertia = 0;
      for (int64_t j = 0; j < p; ++j) {
        int arg = 0;
        double best = std::numeric_limits<double>::infinity();
        for (int k = 0; k < kc; ++k) {
          const double dd = (points.row(j) - c.row(k)).squaredNorm();
          if (dd < best) {
            best = dd;
            arg = k;
          }
        }
        if (label(j) != arg) changed = true;
        label(j) = arg;
        dist(j) = best;
        inertia += best;
      }
      if (!changed) break;
      MatrixXd sum = MatrixXd::Zero(kc, points.cols());
      Eigen::VectorXi count = Eigen::VectorXi::Zero(kc);
      for (int64_t j = 0; j < p; ++j) {
        sum.row(label(j)) += points.row(j);
        ++count(label(j));
      }
      for (int k = 0; k < kc; ++k) {
        if (count(k) > 0) {
          c.row(k) = sum.row(k) / count(k);
        } else {  // empty cluster: move it to the point worst served by the current centers
          Eigen::Index far;
          dist.maxCoeff(&far);
          c.row(k) = points.row(far);
          dist(far) = 0;
        }
      }
    }
    if (inertia < best_inertia) {
      best_inertia = inertia;
      best_c = c;
    }
  }
  return best_c;
}

}  // namespace cmestream::internal
