// Low-rank state embedding of a Markov process (seed paper 000, Algorithms 1 and 2;
// docs/algorithms.md §3).
//
// Two pieces with a snapshot between them:
//   EmbeddingMoments      streaming accumulator of S_x = sum h(x)h(x)^T, S_y = sum h(y)h(y)^T,
//                         P_h = sum h(x)h(y)^T and n (weights gamma^age with forgetting);
//   StateEmbedding::Fit pure refresh: EmbeddingMomentsSnapshot + options -> StateEmbedding,
//                         an immutable object answering Psi(x), p_hat(y|x), singular values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/embedding/feature_map.h"
#include "core/io/fwd.h"

namespace cmestream {

// Immutable copy of the moments; never aliases the accumulator. Values are true (forgotten)
// sums: S_x = sum_t w_t h(x_t) h(x_t)^T etc., n = sum_t w_t, w_t = gamma^(T - t).
struct EmbeddingMomentsSnapshot {
  std::shared_ptr<const FeatureMap> features;
  MatrixXd Sx;          // N x N symmetric
  MatrixXd Sy;          // N x N symmetric
  MatrixXd Ph;          // N x N
  double n = 0;         // total weight
  int64_t samples = 0;  // raw number of pairs
};

// WHAT THIS OBJECT REPRESENTS
//   The streaming sufficient statistics of docs/algorithms.md §3.2 for one feature map.
//   RFF: pairs are copied into a B x d buffer (Observe: O(d), no allocation); when the buffer
//   is full (or at Flush/Snapshot) the block is mapped to features H_x, H_y (B x N, one GEMM
//   each) and folded in by GEMMs: S_x += H_x^T W H_x (symmetric rank-B update, lower
//   triangle), S_y += H_y^T W H_y, P_h += H_x^T W H_y, W = diag(weights). Per-sample cost
//   ~2 N^2 multiply-adds amortized, as matrix-matrix products.
//   One-hot: a pair (i, j) adds its weight to S_x(i,i), S_y(j,j), P_h(i,j) directly, O(1).
//   Trajectories (x_{t+1} = y_t): the features of each state are computed once (the N cosines
//   are the largest per-pair cost outside the GEMMs), with bit-identical results.
//
//   Forgetting (gamma < 1) is lazy, as in TransitionCounts: moments are stored in units of a
//   global scale w = gamma^-t, a sample adds weight w (times gamma^k inside a batch), reads
//   divide by w, and everything is renormalized when w > 1e100 (O(N^2), once every
//   ~230/(1 - gamma) samples). So forgetting adds O(1) per sample.
//
// INITIAL VALUE
//   All moments zero, samples() == 0, nothing buffered.
class EmbeddingMoments {
 public:
  struct Options {
    int batch_size = 64;      // B, pairs per GEMM update, >= 1 (ignored for one-hot)
    double forgetting = 1.0;  // per-sample decay gamma in (0, 1]; 1 = none
    absl::Status Validate() const;
  };

  // requires: features != nullptr and options.Validate().ok() (checked; aborts otherwise).
  EmbeddingMoments(std::shared_ptr<const FeatureMap> features, const Options& options);

  // requires: x and y point to features->input_dim() finite doubles (one-hot: integral ids in
  // range — validate with ValidatePoints first). O(d) copy (RFF) or O(1) (one-hot), plus an
  // amortized share of the batch GEMMs; never allocates.
  void Observe(const double* x, const double* y);
  // Validates all rows first (all-or-nothing), then observes them in order.
  absl::Status ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y);
  // Folds the buffered pairs into the moments (no-op when empty).
  void Flush();
  // Copies the moments out, buffered pairs included (O(N^2)). Does not change this object:
  // the buffered pairs are folded into a copy. Flushing the live accumulator here would make
  // its floating-point summation order depend on when refreshes happen, and then neither WAL
  // replay nor snapshot + replay would reproduce the uninterrupted model bit for bit.
  EmbeddingMomentsSnapshot Snapshot() const;

  const FeatureMap& features() const { return *features_; }
  const Options& options() const { return options_; }
  int64_t samples() const { return samples_; }  // including buffered pairs
  int buffered() const { return buffered_; }
  // Pairs whose x features were copied from the previous pair's y (trajectory reuse; RFF).
  // Diagnostics and tests; not serialized.
  int64_t reused_features() const { return reused_; }

  // Snapshot support (core/embedding/embedding_moments_io.cc; object tag "EMOM", version 1). Writes
  // the full per-sample state (no flush, no re-factorization), so that Deserialize() followed
  // by the same calls gives results bit-identical to never having stopped. Deserialize bounds
  // every dimension by the stored options before allocating; errors are DataLoss naming the
  // source and offset (a bad tag or an unknown version are named as such).
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<EmbeddingMoments> Deserialize(io::Reader& r);

 private:
  void Rescale();
  EmbeddingMomentsSnapshot SnapshotOfFlushed() const;  // requires buffered_ == 0

  std::shared_ptr<const FeatureMap> features_;
  Options options_;
  int n_features_ = 0;
  int dim_ = 0;
  int64_t samples_ = 0;
  double scale_ = 1;  // global unit w
  double inv_gamma_ = 1;
  double n_stored_ = 0;
  MatrixXd sx_, sy_, ph_;              // stored moments (S_x, S_y lower triangle only for RFF)
  RowMatrixXd xbuf_, ybuf_, hx_, hy_;  // B x d, B x d, B x N, B x N
  VectorXd wbuf_;                      // B, sqrt of per-row weights
  int buffered_ = 0;
  // Trajectory reuse (RFF): the projection Omega^T y and the features h(y) of the last y
  // activated in the previous block, and that y. A pair whose x is bitwise that y and whose
  // projection is bitwise the same copies h(y) instead of recomputing the N cosines (h is a
  // pure function of the projection, so the bits are those of a recomputation). Derived state:
  // not serialized, rebuilt by the next block (a restored learner recomputes once).
  VectorXd last_arg_, last_h_, last_point_;
  bool has_last_ = false;
  int64_t reused_ = 0;
};

// WHAT THIS OBJECT REPRESENTS
//   The refreshed embedding (docs/algorithms.md §3.3) of one moments snapshot:
//     C_x = S_x/n = Q Λ Q^T, keep J eigenpairs with Λ_j >= rel_threshold * Λ_1 -> Φ(x) = Q_J^T h(x),
//     ρ = Λ_J; same for y (Q~, ρ~); P = Q_J^T (P_h/n) Q~_J~;
//     R = diag(ρ)^-1/2 P diag(ρ~)^-1/2 = U Σ V^T;
//     Ψ(x) = Σ_r U_r^T diag(ρ)^-1/2 Φ(x)                          (Algorithm 2)
//     p_hat(y|x) = Φ(x)^T diag(ρ)^-1/2 U_r Σ_r V_r^T diag(ρ~)^-1/2 Φ~(y)
//   p_hat is a density relative to the empirical measure of y (for one-hot features it is
//   P_hat(i, j) / π'_j). For one-hot features R is the normalized count matrix
//   D^-1/2 (N/n) D'^-1/2 (D, D' the visit frequencies as source / target), and the rank-r
//   reconstruction (ReshapedMoments) is paper 000 Algorithm 1 on L2(π)-orthonormal features.
//   Immutable; queries need only this object.
class StateEmbedding {
 public:
  struct Options {
    int rank = 4;                      // r >= 1; clipped to the number of singular values
    double relative_threshold = 1e-6;  // keep eigenvalues >= this * the largest; in (0, 1)
    absl::Status Validate() const;
  };

  enum class Termination { kSuccess, kRankClipped };

  struct Summary {
    Termination termination = Termination::kSuccess;
    std::string message;
    int num_features = -1;       // N
    int kept_x = -1;             // J
    int kept_y = -1;             // J~
    int rank = -1;               // r actually used
    int suggested_rank = -1;     // argmax_k (σ_k - σ_{k+1}) over k >= 2 (σ_1 is the constant)
    double samples_weight = -1;  // n
    double seconds_eigen = -1;
    double seconds_svd = -1;
    std::string BriefReport() const;
  };

  // The refresh. Errors: FailedPrecondition when the snapshot has no weight (n == 0) or no
  // features; InvalidArgument for bad options. Rank larger than min(J, J~) is clipped and
  // reported in the Summary (kRankClipped), not an error.
  static absl::StatusOr<StateEmbedding> Fit(const EmbeddingMomentsSnapshot& snapshot, const Options& options);

  // Accessors.
  const Summary& summary() const { return summary_; }
  int rank() const { return rank_; }
  const FeatureMap& features() const { return *features_; }
  // All singular values of R, descending (min(J, J~) of them). σ_1 = 1 up to sampling error.
  const VectorXd& singular_values() const { return singular_values_; }
  // gaps[k] = σ_{k+1} - σ_{k+2} (0-based: gap after the (k+1)-th value), size #σ - 1.
  VectorXd SingularValueGaps() const;
  const VectorXd& rho_x() const { return rho_x_; }  // ρ (J)
  const VectorXd& rho_y() const { return rho_y_; }  // ρ~ (J~)

  // requires: features().ValidatePoints(points).ok(). Returns n x r, row t = Ψ(points_t)^T.
  RowMatrixXd Embed(const Eigen::Ref<const RowMatrixXd>& points) const;
  // requires: valid points. Returns n_x x n_y matrix of p_hat(y_b | x_a).
  MatrixXd TransitionDensity(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y) const;
  // The rank-r estimate of P_h/n in the original feature coordinates:
  // Q_J diag(ρ)^1/2 U_r Σ_r V_r^T diag(ρ~)^1/2 Q~^T (N x N). One-hot: the reshaped joint
  // frequency matrix, an estimate of diag(π) P.
  MatrixXd ReshapedMoments() const;

 private:
  StateEmbedding() = default;

  std::shared_ptr<const FeatureMap> features_;
  Summary summary_;
  int rank_ = 0;
  VectorXd singular_values_;
  VectorXd rho_x_, rho_y_;
  MatrixXd qx_, qy_;     // N x J, N x J~
  MatrixXd u_, v_;       // J x r, J~ x r
  MatrixXd embed_map_;   // N x r: Q_J diag(ρ)^-1/2 U_r Σ_r, so Ψ(x) = embed_map^T h(x)
  MatrixXd target_map_;  // N x r: Q~ diag(ρ~)^-1/2 V_r, so p_hat = Ψ(x)^T target_map^T h(y)
};

// Paper 000 Algorithm 1 on an explicit matrix: best rank-r approximation (truncated SVD).
MatrixXd TruncatedSvd(const Eigen::Ref<const MatrixXd>& m, int rank);

}  // namespace cmestream
