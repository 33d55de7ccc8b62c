#include "core/aggregation/soft_aggregation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include <Eigen/QR>
#include <Eigen/SVD>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/aggregation/vertex_hunting.h"
#include "core/cluster/kmeans.h"
#include "core/linalg/truncated_svd.h"

namespace cmestream {
namespace {

using SpMat = Eigen::SparseMatrix<double>;  // column-major
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A row whose h_1 entry is below this fraction of max |h_1| is treated as numerically zero
// (SCORE divides by it). In exact arithmetic h_1 > 0 on an irreducible chain (Perron).
constexpr double kZeroH1Fraction = 1e-12;
// [1^T; B] with reciprocal condition below this is reported as a degenerate simplex.
constexpr double kVertexRcondTrouble = 1e-10;

absl::StatusOr<AggregationResult> FitSparse(const SpMat& n_all, const SoftAggregation::Options& options) {
  const auto t0 = Clock::now();
  const int p = static_cast<int>(n_all.rows());
  const int r = options.meta_states;
  AggregationResult out;
  SoftAggregation::Summary& sum = out.summary;
  std::vector<std::string> trouble;

  // ---- Kept states: incoming transitions (column sums c_j = (N^T 1)_j > 0). ----
  VectorXd col_sum = VectorXd::Zero(p);
  for (int j = 0; j < p; ++j) col_sum(j) = n_all.col(j).sum();
  std::vector<int> row_of(p, -1);
  for (int j = 0; j < p; ++j) {
    if (col_sum(j) > 0) {
      row_of[j] = static_cast<int>(out.states.size());
      out.states.push_back(j);
    } else {
      out.excluded_states.push_back(j);
    }
  }
  const int k = static_cast<int>(out.states.size());
  sum.kept_states = k;
  sum.excluded_states = static_cast<int64_t>(out.excluded_states.size());
  if (k < r) {
    return absl::FailedPreconditionError(absl::StrCat("soft aggregation needs at least r = ", r,
                                                      " states with incoming transitions; have ", k, " of ", p, " (",
                                                      out.excluded_states.size(), " excluded)"));
  }

  // ---- Step 1(i): N~ = N[:, kept] diag(c_kept)^{-1/2} (all p rows: excluded states' outgoing
  // transitions are data too), and N_kk = N[kept, kept] for P^ (same row sums, since excluded
  // columns are zero).
  std::vector<Eigen::Triplet<double>> tt, tk;
  tt.reserve(n_all.nonZeros());
  tk.reserve(n_all.nonZeros());
  VectorXd row_sum = VectorXd::Zero(k);
  for (int j = 0; j < p; ++j) {
    const int cj = row_of[j];
    if (cj < 0) continue;
    const double scale = 1.0 / std::sqrt(col_sum(j));
    for (SpMat::InnerIterator it(n_all, j); it; ++it) {
      if (it.value() == 0) continue;
      tt.emplace_back(static_cast<int>(it.row()), cj, it.value() * scale);
      const int ri = row_of[it.row()];
      if (ri >= 0) {
        tk.emplace_back(ri, cj, it.value());
        row_sum(ri) += it.value();
      }
    }
  }
  SpMat ntilde(p, k), nkk(k, k);
  ntilde.setFromTriplets(tt.begin(), tt.end());
  nkk.setFromTriplets(tk.begin(), tk.end());

  MatrixXd h;  // k x r right singular vectors
  const auto t_svd = Clock::now();
  if (k < options.truncated_svd_min_states) {
    sum.svd_kind = SoftAggregation::SvdKind::kDense;
    const MatrixXd dense = MatrixXd(ntilde);
    Eigen::BDCSVD<MatrixXd> svd(dense, Eigen::ComputeThinV);
    h = svd.matrixV().leftCols(r);
    sum.singular_values = svd.singularValues().head(std::min<int64_t>(svd.singularValues().size(), r + 1));
    sum.svd_iterations = 0;
    sum.svd_residual = 0;
  } else {
    sum.svd_kind = SoftAggregation::SvdKind::kTruncated;
    TruncatedSvdOptions so;
    so.oversampling = options.svd_oversampling;
    so.max_iterations = options.svd_max_iterations;
    so.tolerance = options.svd_tolerance;
    so.seed = options.seed;
    // Only the r vectors used are converged to tolerance; sigma_{r+1} is reported from the
    // same block (a Ritz value: a lower bound, accurate to a few digits). Converging it too
    // tripled the iterations at p = 1000 (noise singular values have no gap after them).
    absl::StatusOr<TruncatedSvdResult> svd = TruncatedRightSvd(ntilde, r, so);
    if (!svd.ok()) return svd.status();
    h = std::move(svd->right_vectors);
    sum.singular_values = svd->singular_values.head(std::min<int64_t>(svd->singular_values.size(), r + 1));
    sum.svd_iterations = svd->iterations;
    sum.svd_residual = svd->max_residual;
    if (!svd->converged) {
      trouble.push_back(absl::StrCat("truncated SVD not converged after ", svd->iterations, " iterations (residual ",
                                     svd->max_residual, ")"));
    }
  }
  sum.svd_seconds = Seconds(t_svd, Clock::now());

  // Flip h_1 to be positive (Perron vector of N~^T N~, defined up to sign).
  if (h.col(0).sum() < 0) h.col(0) *= -1;
  VectorXd h1 = h.col(0);
  const double h1_floor = kZeroH1Fraction * h1.cwiseAbs().maxCoeff();
  sum.zero_h1_rows = 0;
  for (int j = 0; j < k; ++j) {
    if (!(h1(j) > h1_floor)) {
      h1(j) = h1_floor > 0 ? h1_floor : std::numeric_limits<double>::min();
      ++sum.zero_h1_rows;
    }
  }
  if (sum.zero_h1_rows > 0) {
    trouble.push_back(absl::StrCat(sum.zero_h1_rows, " rows with h_1 ~ 0 (disconnected states?) clamped before SCORE"));
  }
  // SCORE: D^ = diag(h_1)^{-1} [h_2 ... h_r].
  out.score = h.rightCols(r - 1).array().colwise() / h1.array();

  // ---- Step 1(ii): vertex hunting on the rows of D^. ----
  const auto t_v = Clock::now();
  if (options.vertex_hunting == SoftAggregation::VertexHunting::kSpa || r == 1) {
    sum.vertex_rows = internal::SuccessiveProjection(out.score, r);
    out.vertices.resize(r, r - 1);
    for (int q = 0; q < r; ++q) out.vertices.row(q) = out.score.row(sum.vertex_rows[q]);
  } else {
    // The library's k-means (core/cluster/kmeans.h) with equal weights, min(kmeans_centers, p)
    // centers (docs/algorithms.md §4.2).
    WeightedKMeansOptions km;
    km.k = static_cast<int>(std::min<int64_t>(options.kmeans_centers, out.score.rows()));
    km.restarts = options.kmeans_restarts;
    km.max_iterations = options.kmeans_max_iterations;
    km.seed = options.seed;
    absl::StatusOr<WeightedKMeansResult> fit =
        WeightedKMeans(RowMatrixXd(out.score), VectorXd::Ones(out.score.rows()), km);
    if (!fit.ok())
      return absl::FailedPreconditionError(absl::StrCat("k-means on the SCORE rows: ", fit.status().message()));
    const MatrixXd centers = fit->centroids;
    if (centers.rows() < r) {
      return absl::FailedPreconditionError("k-means produced fewer centers than meta-states");
    }
    const std::vector<int> idx = internal::SuccessiveProjection(centers, r);
    out.vertices.resize(r, r - 1);
    for (int q = 0; q < r; ++q) out.vertices.row(q) = centers.row(idx[q]);
  }
  sum.vertex_seconds = Seconds(t_v, Clock::now());

  // ---- Step 1(iii): w*_j = argmin_q ||d_j - B q||^2 + (1 - 1^T q)^2. With
  // Bt = [1^T; B] (r x r) this is min ||(1; d_j) - Bt q||^2: the barycentric coordinates
  // Bt^{-1} (1; d_j) when Bt is invertible, the least-squares solution otherwise (pivoted QR).
  const auto t_w = Clock::now();
  MatrixXd bt(r, r);
  bt.row(0).setOnes();
  bt.bottomRows(r - 1) = out.vertices.transpose();
  MatrixXd rhs(r, k);
  rhs.row(0).setOnes();
  rhs.bottomRows(r - 1) = out.score.transpose();
  Eigen::ColPivHouseholderQR<MatrixXd> qr(bt);
  {
    const VectorXd diag = qr.matrixQR().diagonal().cwiseAbs();
    sum.vertex_rcond = diag.maxCoeff() > 0 ? diag.minCoeff() / diag.maxCoeff() : 0;
  }
  if (sum.vertex_rcond < kVertexRcondTrouble) {
    trouble.push_back(absl::StrCat("degenerate simplex: rcond([1; B]) = ", sum.vertex_rcond));
  }
  out.W_raw = qr.solve(rhs).transpose();
  out.W = out.W_raw.cwiseMax(0.0);
  double clipped = 0;
  for (int j = 0; j < k; ++j) {
    clipped += -out.W_raw.row(j).cwiseMin(0.0).sum();
    const double s = out.W.row(j).sum();
    if (s > 0) {
      out.W.row(j) /= s;
    } else {  // all barycentric coordinates <= 0 (only possible when Bt is singular)
      Eigen::Index arg;
      out.W_raw.row(j).maxCoeff(&arg);
      out.W.row(j).setZero();
      out.W(j, arg) = 1;
    }
  }
  sum.mean_clipped_mass = clipped / k;

  // V^ = colnormalize_l1(diag(h_1) diag(c)^{1/2} W).
  out.V.resize(k, r);
  for (int j = 0; j < k; ++j) out.V.row(j) = out.W.row(j) * (h1(j) * std::sqrt(col_sum(out.states[j])));
  for (int q = 0; q < r; ++q) {
    const double s = out.V.col(q).sum();
    if (s > 0) {
      out.V.col(q) /= s;
    } else {
      out.V.col(q).setConstant(1.0 / k);
      trouble.push_back(absl::StrCat("meta-state ", q, " got no weight; its V column set uniform"));
    }
  }

  // ---- Step 3: anchors and hard partition. ----
  out.anchors.assign(r, {});
  out.partition.resize(k);
  for (int j = 0; j < k; ++j) {
    Eigen::Index arg;
    const double mx = out.W.row(j).maxCoeff(&arg);
    out.partition[j] = static_cast<int>(arg);
    if (mx >= 1.0 - options.anchor_threshold) out.anchors[arg].push_back(j);
  }
  sum.weights_seconds = Seconds(t_w, Clock::now());

  // ---- Step 2: U^ = P^ V^ (V^T V^)^{-1}. P^ V^ is formed sparsely (rows of N_kk / row sums).
  const auto t_u = Clock::now();
  const MatrixXd nv = nkk * out.V;  // k x r
  const MatrixXd gram = out.V.transpose() * out.V;
  // V^T V is r x r, SPD when the columns of V are independent; the pivoted QR degrades
  // gracefully (least squares) when two columns coincide instead of dividing by ~0.
  Eigen::ColPivHouseholderQR<MatrixXd> gqr(gram);
  out.U_raw = gqr.solve(nv.transpose()).transpose();
  out.U.resize(k, r);
  for (int i = 0; i < k; ++i) {
    if (row_sum(i) > 0) {
      out.U_raw.row(i) /= row_sum(i);
      out.U.row(i) = out.U_raw.row(i).cwiseMax(0.0);
      const double s = out.U.row(i).sum();
      if (s > 0) {
        out.U.row(i) /= s;
      } else {
        out.U.row(i).setConstant(1.0 / r);
      }
    } else {
      out.rows_without_outgoing.push_back(i);
      out.U_raw.row(i).setZero();
      out.U.row(i).setConstant(1.0 / r);
    }
  }
  sum.u_seconds = Seconds(t_u, Clock::now());

  // ---- Distance of U V^T to P^ (rows with outgoing transitions), row by row: O(k^2 r). ----
  const auto t_d = Clock::now();
  {
    const SpMat nkk_rows = SpMat(nkk.transpose());  // column i = row i of N_kk
    VectorXd est(k);
    double fro2 = 0, tv = 0;
    int rows = 0;
    for (int i = 0; i < k; ++i) {
      if (row_sum(i) <= 0) continue;
      est.noalias() = out.V * out.U.row(i).transpose();
      double l1 = est.cwiseAbs().sum(), sq = est.squaredNorm();
      for (SpMat::InnerIterator it(nkk_rows, i); it; ++it) {
        const double ph = it.value() / row_sum(i), e = est(it.row());
        l1 += std::abs(ph - e) - std::abs(e);
        sq += (ph - e) * (ph - e) - e * e;
      }
      fro2 += std::max(sq, 0.0);
      tv += 0.5 * l1;
      ++rows;
    }
    out.frobenius_to_empirical = std::sqrt(fro2);
    out.mean_row_tv_to_empirical = rows > 0 ? tv / rows : 0;
  }
  sum.distance_seconds = Seconds(t_d, Clock::now());

  sum.total_seconds = Seconds(t0, Clock::now());
  if (trouble.empty()) {
    sum.termination = SoftAggregation::Termination::kSuccess;
  } else {
    sum.termination = SoftAggregation::Termination::kNumericalTrouble;
    sum.message = absl::StrJoin(trouble, "; ");
  }
  return out;
}

absl::Status CheckEntry(double v, int64_t i, int64_t j) {
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition counts must be finite and >= 0; N[", i, ",", j, "] = ", v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SoftAggregation::Options::Validate() const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError("Violated constraint: " + what); };
  if (meta_states < 1) return bad(absl::StrCat("meta_states >= 1; got ", meta_states));
  if (!(anchor_threshold >= 0 && anchor_threshold < 1)) {
    return bad(absl::StrCat("0 <= anchor_threshold < 1; got ", anchor_threshold));
  }
  if (vertex_hunting != VertexHunting::kSpa && vertex_hunting != VertexHunting::kKMeansThenSpa) {
    return bad("vertex_hunting is kSpa or kKMeansThenSpa");
  }
  if (vertex_hunting == VertexHunting::kKMeansThenSpa && kmeans_centers < meta_states) {
    return bad(absl::StrCat("kmeans_centers >= meta_states; got ", kmeans_centers, " < ", meta_states));
  }
  if (kmeans_restarts < 1) return bad(absl::StrCat("kmeans_restarts >= 1; got ", kmeans_restarts));
  if (kmeans_max_iterations < 1) return bad(absl::StrCat("kmeans_max_iterations >= 1; got ", kmeans_max_iterations));
  if (truncated_svd_min_states < 1) {
    return bad(absl::StrCat("truncated_svd_min_states >= 1; got ", truncated_svd_min_states));
  }
  if (svd_oversampling < 0) return bad(absl::StrCat("svd_oversampling >= 0; got ", svd_oversampling));
  if (svd_max_iterations < 1) return bad(absl::StrCat("svd_max_iterations >= 1; got ", svd_max_iterations));
  if (!(svd_tolerance > 0 && svd_tolerance < 1)) return bad(absl::StrCat("0 < svd_tolerance < 1; got ", svd_tolerance));
  return absl::OkStatus();
}

std::string SoftAggregation::Summary::BriefReport() const {
  const char* term = termination == Termination::kSuccess            ? "SUCCESS"
                     : termination == Termination::kNumericalTrouble ? "NUMERICAL_TROUBLE"
                                                                     : "NOT_RUN";
  const char* svd = svd_kind == SvdKind::kDense ? "dense" : svd_kind == SvdKind::kTruncated ? "truncated" : "none";
  std::string s = absl::StrFormat(
      "SoftAggregation %s: kept %d excluded %d, svd %s (%d it, residual %.2e) %.4fs, vertices %.4fs "
      "(rcond %.3g), weights %.4fs, U %.4fs, distance %.4fs, total %.4fs; mean clipped mass %.3g",
      term, kept_states, excluded_states, svd, svd_iterations, svd_residual, svd_seconds, vertex_seconds, vertex_rcond,
      weights_seconds, u_seconds, distance_seconds, total_seconds, mean_clipped_mass);
  if (!message.empty()) absl::StrAppend(&s, "; ", message);
  return s;
}

absl::StatusOr<AggregationResult> SoftAggregation::Fit(const SpMat& counts, const SoftAggregation::Options& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (counts.rows() != counts.cols() || counts.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("count matrix must be square and non-empty; got ", counts.rows(), " x ", counts.cols()));
  }
  for (int j = 0; j < counts.outerSize(); ++j) {
    for (SpMat::InnerIterator it(counts, j); it; ++it) {
      if (absl::Status s = CheckEntry(it.value(), it.row(), it.col()); !s.ok()) return s;
    }
  }
  return FitSparse(counts, options);
}

absl::StatusOr<AggregationResult> SoftAggregation::Fit(const Eigen::Ref<const MatrixXd>& counts,
                                                       const SoftAggregation::Options& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (counts.rows() != counts.cols() || counts.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("count matrix must be square and non-empty; got ", counts.rows(), " x ", counts.cols()));
  }
  for (int64_t j = 0; j < counts.cols(); ++j) {
    for (int64_t i = 0; i < counts.rows(); ++i) {
      if (absl::Status s = CheckEntry(counts(i, j), i, j); !s.ok()) return s;
    }
  }
  return FitSparse(counts.sparseView(), options);
}

absl::StatusOr<AggregationResult> SoftAggregation::Fit(int p, const std::vector<TransitionCount>& counts,
                                                       const SoftAggregation::Options& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("number of states p >= 1; got ", p));
  std::vector<Eigen::Triplet<double>> t;
  t.reserve(counts.size());
  for (const TransitionCount& c : counts) {
    if (c.from < 0 || c.from >= p || c.to < 0 || c.to >= p) {
      return absl::InvalidArgumentError(
          absl::StrCat("transition ", c.from, " -> ", c.to, " outside the state range [0, ", p, ")"));
    }
    if (absl::Status s = CheckEntry(c.count, c.from, c.to); !s.ok()) return s;
    t.emplace_back(c.from, c.to, c.count);
  }
  SpMat n(p, p);
  n.setFromTriplets(t.begin(), t.end());  // sums duplicates
  return FitSparse(n, options);
}

std::vector<int> MatchMetaStates(const Eigen::Ref<const MatrixXd>& truth, const Eigen::Ref<const MatrixXd>& estimate) {
  const int r = static_cast<int>(truth.cols());
  MatrixXd cost(r, r);
  for (int a = 0; a < r; ++a)
    for (int b = 0; b < r; ++b) cost(a, b) = (truth.col(a) - estimate.col(b)).cwiseAbs().sum();
  std::vector<int> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  if (r <= 8) {
    std::vector<int> best = perm;
    double best_cost = std::numeric_limits<double>::infinity();
    do {
      double c = 0;
      for (int a = 0; a < r; ++a) c += cost(a, perm[a]);
      if (c < best_cost) {
        best_cost = c;
        best = perm;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
    return best;
  }
  // Greedy beyond r = 8: assign the globally cheapest remaining (truth, estimate) pair first.
  std::vector<char> used(r, 0);
  std::vector<int> assign(r, -1);
  for (int step = 0; step < r; ++step) {
    double bc = std::numeric_limits<double>::infinity();
    int ba = -1, bb = -1;
    for (int a = 0; a < r; ++a) {
      if (assign[a] >= 0) continue;
      for (int b = 0; b < r; ++b)
        if (!used[b] && cost(a, b) < bc) {
          bc = cost(a, b);
          ba = a;
          bb = b;
        }
    }
    assign[ba] = bb;
    used[bb] = 1;
  }
  return assign;
}

double MeanColumnTv(const Eigen::Ref<const MatrixXd>& truth, const Eigen::Ref<const MatrixXd>& estimate,
                    const std::vector<int>& perm) {
  double s = 0;
  for (int k = 0; k < truth.cols(); ++k) s += 0.5 * (truth.col(k) - estimate.col(perm[k])).cwiseAbs().sum();
  return s / truth.cols();
}

double MeanRowTv(const Eigen::Ref<const MatrixXd>& truth, const Eigen::Ref<const MatrixXd>& estimate,
                 const std::vector<int>& perm) {
  double s = 0;
  for (int i = 0; i < truth.rows(); ++i) {
    double l1 = 0;
    for (int k = 0; k < truth.cols(); ++k) l1 += std::abs(truth(i, k) - estimate(i, perm[k]));
    s += 0.5 * l1;
  }
  return s / truth.rows();
}

}  // namespace cmestream
