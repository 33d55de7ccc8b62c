// Weighted k-means (see kmeans.h; docs/algorithms.md §3.4).
#include "core/cluster/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/random.h"

namespace cmestream {
namespace {

using internal::Uniform01;

// Squared distances of every point to every centroid: n x k, by ||x||^2 + ||c||^2 - 2 x c^T.
MatrixXd SquaredDistances(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& c) {
  MatrixXd d = -2.0 * (x * c.transpose());
  d.colwise() += x.rowwise().squaredNorm();
  d.rowwise() += c.rowwise().squaredNorm().transpose();
  return d.cwiseMax(0.0);
}

// Samples an index with probability ∝ p (p >= 0, sum > 0).
int SampleIndex(const VectorXd& p, std::mt19937_64& rng) {
  const double total = p.sum();
  double u = Uniform01(rng) * total;
  int last_positive = -1;
  for (int i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last_positive = i;
    if (u < p[i]) return i;
    u -= p[i];
  }
  return last_positive;  // rounding at the end of the cumulative sum
}

struct Run {
  RowMatrixXd centroids;
  Eigen::VectorXi labels;
  double inertia = 0;
  int iterations = 0;
};

// Labels every point with its nearest centroid and sets the weighted inertia; returns the
// squared distances it used (n x k).
MatrixXd Assign(const Eigen::Ref<const RowMatrixXd>& x, const VectorXd& w, Run* run) {
  MatrixXd d2 = SquaredDistances(x, run->centroids);
  run->inertia = 0;
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    Eigen::Index j = 0;
    const double dmin = d2.row(i).minCoeff(&j);
    run->labels[i] = static_cast<int>(j);
    run->inertia += w[i] * dmin;
  }
  return d2;
}

Run OneRestart(const Eigen::Ref<const RowMatrixXd>& x, const VectorXd& w, int k, int max_iter, double tol,
               std::mt19937_64& rng) {
  const int n = static_cast<int>(x.rows());
  Run run;
  run.centroids.resize(k, x.cols());
  // k-means++ seeding, with the weights: P(i) ∝ w_i D(x_i)^2 (first center ∝ w_i).
  VectorXd best_d2 = VectorXd::Constant(n, std::numeric_limits<double>::infinity());
  int first = SampleIndex(w, rng);
  run.centroids.row(0) = x.row(first);
  for (int c = 1; c < k; ++c) {
    const VectorXd d2 = SquaredDistances(x, run.centroids.row(c - 1)).col(0);
    best_d2 = best_d2.cwiseMin(d2);
    VectorXd p = w.cwiseProduct(best_d2);
    if (!(p.sum() > 0)) p = w;  // all positive-weight points coincide with centers: fall back
    run.centroids.row(c) = x.row(SampleIndex(p, rng));
  }
  run.labels.resize(n);
  double previous = std::numeric_limits<double>::infinity();
  for (int it = 1; it <= max_iter; ++it) {
    run.iterations = it;
    const MatrixXd d2 = Assign(x, w, &run);
    // Weighted means; an empty cluster is re-seeded at the worst-served point.
    RowMatrixXd sums = RowMatrixXd::Zero(k, x.cols());
    VectorXd mass = VectorXd::Zero(k);
    for (int i = 0; i < n; ++i) {
      sums.row(run.labels[i]) += w[i] * x.row(i);
      mass[run.labels[i]] += w[i];
    }
    for (int c = 0; c < k; ++c) {
      if (mass[c] > 0) {
        run.centroids.row(c) = sums.row(c) / mass[c];
      } else {
        Eigen::Index worst = 0;
        VectorXd served(n);
        for (int i = 0; i < n; ++i) served[i] = w[i] * d2(i, run.labels[i]);
        served.maxCoeff(&worst);
        run.centroids.row(c) = x.row(worst);
      }
    }
    if (previous - run.inertia <= tol * std::max(previous, 1e-300) && it > 1) break;
    previous = run.inertia;
  }
  // Final assignment and inertia for the final centroids.
  Assign(x, w, &run);
  return run;
}

}  // namespace

absl::Status WeightedKMeansOptions::Validate() const {
  if (k < 1) return absl::InvalidArgumentError(absl::StrCat("Violated constraint: k >= 1 (got ", k, ")"));
  if (restarts < 1)
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: restarts >= 1 (got ", restarts, ")"));
  if (max_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: max_iterations >= 1 (got ", max_iterations, ")"));
  }
  if (!(tolerance >= 0)) return absl::InvalidArgumentError("Violated constraint: tolerance >= 0");
  return absl::OkStatus();
}

std::string WeightedKMeansResult::BriefReport() const {
  return absl::StrFormat("WeightedKMeans: k=%d inertia=%.6g iterations=%d best_restart=%d of %d",
                         static_cast<int>(centroids.rows()), inertia, iterations, best_restart,
                         static_cast<int>(restart_inertia.size()));
}

absl::StatusOr<WeightedKMeansResult> WeightedKMeans(const Eigen::Ref<const RowMatrixXd>& points,
                                                    const Eigen::Ref<const VectorXd>& weights,
                                                    const WeightedKMeansOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (weights.size() != points.rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights has ", weights.size(), " entries, points has ", points.rows(), " rows"));
  }
  if (!points.allFinite()) return absl::InvalidArgumentError("points contain non-finite values");
  int positive = 0;
  for (Eigen::Index i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("weight ", i, " is negative or non-finite"));
    }
    if (weights[i] > 0) ++positive;
  }
  if (positive < options.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("k = ", options.k, " clusters but only ", positive, " points with positive weight"));
  }
  const VectorXd w = weights / weights.sum();  // scale-free inertia
  std::mt19937_64 rng(options.seed);
  WeightedKMeansResult best;
  best.restart_inertia.resize(options.restarts);
  for (int r = 0; r < options.restarts; ++r) {
    Run run = OneRestart(points, w, options.k, options.max_iterations, options.tolerance, rng);
    best.restart_inertia[r] = run.inertia;
    if (best.best_restart < 0 || run.inertia < best.inertia) {
      best.centroids = std::move(run.centroids);
      best.labels = std::move(run.labels);
      best.inertia = run.inertia;
      best.iterations = run.iterations;
      best.best_restart = r;
    }
  }
  return best;
}

Eigen::VectorXi NearestCentroid(const Eigen::Ref<const RowMatrixXd>& centroids,
                                const Eigen::Ref<const RowMatrixXd>& points) {
  Eigen::VectorXi labels(points.rows());
  if (points.rows() == 0) return labels;
  const MatrixXd d2 = SquaredDistances(points, centroids);
  for (Eigen::Index i = 0; i < points.rows(); ++i) {
    Eigen::Index j = 0;
    d2.row(i).minCoeff(&j);
    labels[i] = static_cast<int>(j);
  }
  return labels;
}

}  // namespace cmestream
