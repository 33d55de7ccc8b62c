// Soft state aggregation with anchor states (paper 003, Algorithm 1; docs/algorithms.md §4).
//
// WHAT THIS REPRESENTS
//   A pure function from a transition count matrix N (N[i,j] = number of observed transitions
//   i -> j, p states) and a number of meta-states r to the estimated soft aggregation model
//   P ~ U V^T (paper 003, eq. 2):
//     V (p x r): column k is the disaggregation distribution P(X_{t+1} = . | Z_t = k);
//     U (p x r): row i is the aggregation distribution P(Z_t = . | X_t = i);
//   plus the anchor states (states reachable from a single meta-state) and a hard partition.
//   It is service-agnostic: callers (a model's refresh, the CLI, tests) hand in counts and
//   read an AggregationResult; nothing here keeps state between calls.
//
// ROWS AND EXCLUDED STATES
//   Only states with incoming transitions (column sum of N > 0) can be placed in the simplex
//   (step 1 divides by the column sums). The others are *excluded*: listed by their original
//   index in `excluded_states`, absent from every p_kept-row output, never divided by zero.
//   Their outgoing transitions still enter the SVD (they are rows of N~). Every per-state
//   output is indexed by *row* r = 0..p_kept-1, and `states[r]` is the original state index.
//   Kept states without outgoing transitions have an undefined empirical row P^_i; they are
//   listed in `rows_without_outgoing`, get U_raw row 0 and U row 1/r, and are skipped by the
//   distance to P^.
//
// COST
//   O(nnz(N) + p_kept r^2) plus the SVD: dense BDCSVD O(p^3) when p_kept <
//   truncated_svd_min_states, otherwise block subspace iteration O(nnz(N) (r + oversampling))
//   per iteration (core/linalg/truncated_svd.h). The distance to P^ costs O(p_kept^2 r).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/SparseCore>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"

namespace cmestream {

struct AggregationResult;
struct TransitionCount;

class SoftAggregation {
 public:
  enum class VertexHunting {
    kSpa,            // successive projection on the SCORE rows (default; best in docs/algorithms.md §4.2)
    kKMeansThenSpa,  // k-means with `kmeans_centers` centers first, then SPA on the centers
  };
  enum class SvdKind { kNone, kDense, kTruncated };
  enum class Termination {
    kNotRun,  // sentinel
    kSuccess,
    kNumericalTrouble,  // result returned, but see Summary::message (ill-posed vertices, SVD
                        // not converged, zero h_1 entries, an empty meta-state)
  };

  struct Options {
    int meta_states = 2;            // r, number of meta-states, >= 1 (and <= kept states)
    double anchor_threshold = 0.1;  // delta_0: anchors are rows with max_k w_j(k) >= 1 - delta_0; in [0, 1)
    VertexHunting vertex_hunting = VertexHunting::kSpa;
    int kmeans_centers = 30;          // k-means centers for kKMeansThenSpa, >= meta_states
                                      // (12 centers pulled vertices inward at p = 200, r = 4; 30 matched SPA)
    int kmeans_restarts = 5;          // >= 1
    int kmeans_max_iterations = 100;  // >= 1
    uint64_t seed = 0x5eed;           // k-means seeding and the truncated SVD starting block
    // Use the truncated SVD when the number of kept states is >= this (else dense BDCSVD).
    // Crossover measured by tests/bench/bench_aggregation.cc (docs/benchmarks.md).
    int truncated_svd_min_states = 200;  // >= 1 (truncated was 5x faster already at p = 200)
    int svd_oversampling = 5;            // truncated SVD block size is r + this, >= 0 (5 fastest of 5..40)
    int svd_max_iterations = 500;        // >= 1
    double svd_tolerance = 1e-10;        // residual of A^T A x = theta x relative to theta_1, in (0,1)

    // OK or InvalidArgument("Violated constraint: ...").
    absl::Status Validate() const;
  };

  struct Summary {
    Termination termination = Termination::kNotRun;
    std::string message;  // why kNumericalTrouble; empty on success
    SvdKind svd_kind = SvdKind::kNone;
    int svd_iterations = -1;        // truncated only; 0 for dense
    double svd_residual = -1;       // truncated only; 0 for dense
    VectorXd singular_values;       // top min(r + 1, kept) singular values of N~ (the gap
                                    // sigma_r / sigma_{r+1} helps choose r); with the truncated
                                    // SVD sigma_{r+1} is a Ritz value (lower bound, few digits)
    std::vector<int> vertex_rows;   // SPA: rows chosen as vertices; k-means: empty
    double vertex_rcond = -1;       // reciprocal condition of [1^T; B] (r x r); ~0 = degenerate simplex
    double mean_clipped_mass = -1;  // mean over rows of sum of negative entries of w*_j (noise gauge)
    int zero_h1_rows = -1;          // rows whose h_1 entry was numerically zero (clamped)
    int64_t kept_states = -1;
    int64_t excluded_states = -1;
    double svd_seconds = -1, vertex_seconds = -1, weights_seconds = -1, u_seconds = -1, distance_seconds = -1,
           total_seconds = -1;

    std::string BriefReport() const;
  };

  // Runs Algorithm 1 of paper 003 on the counts.
  //   requires: counts square p x p, entries finite and >= 0 (InvalidArgument otherwise);
  //     options.Validate().ok() (InvalidArgument otherwise); at least r states with incoming
  //     transitions (FailedPrecondition otherwise: not enough data yet).
  //   ensures: V columns sum to 1 and are >= 0; U and W rows on the simplex; no NaN.
  //     Numerical trouble (degenerate vertices, unconverged SVD) is summary.termination, not an
  //     error. Deterministic given options.seed.
  static absl::StatusOr<AggregationResult> Fit(const Eigen::Ref<const MatrixXd>& counts, const Options& options);
  static absl::StatusOr<AggregationResult> Fit(const Eigen::SparseMatrix<double>& counts, const Options& options);
  // Triplets are summed (duplicates allowed); requires 0 <= from, to < p.
  static absl::StatusOr<AggregationResult> Fit(int p, const std::vector<TransitionCount>& counts,
                                               const Options& options);
};

// Output of SoftAggregation Fit. Rows are kept states (see header comment).
struct AggregationResult {
  std::vector<int> states;                 // original state index of each row (p_kept)
  std::vector<int> excluded_states;        // original indices with no incoming transitions
  std::vector<int> rows_without_outgoing;  // rows whose empirical P^ row is undefined
  MatrixXd V;                              // p_kept x r, disaggregation distributions, columns >= 0 sum to 1
  MatrixXd U_raw;                          // p_kept x r, P^ V (V^T V)^{-1} exactly as step 2 (may be < 0)
  MatrixXd U;         // p_kept x r, U_raw clipped at 0 and rows renormalized to 1 (for display and the estimate)
  MatrixXd W_raw;     // p_kept x r, barycentric weights w*_j (rows sum to 1, may be < 0)
  MatrixXd W;         // p_kept x r, clipped, renormalized weights w_j (step 1(iii))
  MatrixXd score;     // p_kept x (r-1), SCORE coordinates d_j (rows of D^)
  MatrixXd vertices;  // r x (r-1), the vertices b_k found by vertex hunting
  std::vector<std::vector<int>> anchors;  // per meta-state, rows with max_k w_j(k) >= 1 - delta_0 and argmax k
  std::vector<int> partition;             // per row, argmax_k w_j(k) (hard partition)
  // Distance of the estimate U V^T (U clipped: a stochastic matrix) to the empirical
  // P^ = diag(N 1)^{-1} N over rows with outgoing transitions (kept columns only; excluded
  // columns of N are zero anyway). mean_row_tv = mean_i 1/2 ||P^_i - (U V^T)_i||_1.
  double frobenius_to_empirical = -1;
  double mean_row_tv_to_empirical = -1;
  SoftAggregation::Summary summary;

  // U V^T (p_kept x p_kept), a row-stochastic matrix. O(p_kept^2 r) memory and time.
  MatrixXd EstimatedTransitionMatrix() const { return U * V.transpose(); }
};

// One transition count: N[from, to] += count.
struct TransitionCount {
  int from = 0;
  int to = 0;
  double count = 0;
};

// ---- Evaluation helpers (tests, demos, the CLI's ground-truth comparisons) ----

// Permutation perm of the r meta-states minimizing sum_k ||truth.col(k) - estimate.col(perm[k])||_1
// (exhaustive for r <= 8, greedy beyond). requires same shape.
std::vector<int> MatchMetaStates(const Eigen::Ref<const MatrixXd>& truth, const Eigen::Ref<const MatrixXd>& estimate);
// mean_k 1/2 ||truth.col(k) - estimate.col(perm[k])||_1.
double MeanColumnTv(const Eigen::Ref<const MatrixXd>& truth, const Eigen::Ref<const MatrixXd>& estimate,
                    const std::vector<int>& perm);
// mean_i 1/2 ||truth.row(i) - estimate.row(i) permuted||_1, columns of estimate taken as perm.
double MeanRowTv(const Eigen::Ref<const MatrixXd>& truth, const Eigen::Ref<const MatrixXd>& estimate,
                 const std::vector<int>& perm);

}  // namespace cmestream
