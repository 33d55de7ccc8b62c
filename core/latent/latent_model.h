// Multi-view latent-state model by the kernel robust tensor power method (seed paper 001;
// docs/algorithms.md §5).
//
// WHAT THIS REPRESENTS
//   In an HMM, consecutive observations (x_{t-1}, x_t, x_{t+1}) are conditionally independent
//   given the hidden state h_t. With finite features h(x) (the library's FeatureMap,
//   core/embedding/feature_map.h: random Fourier features of a Gaussian kernel, or one-hot
//   indicators for discrete observations = the delta kernel) we use the
//   views a = x_{t-1}, b = x_{t+1}, and the target view c = x_t, and recover
//     pi_h = P(h_t = h) (the stationary weights) and mu_h = E[h(x_t) | h_t = h]
//   (the component embedding; density of component h at x = <h(x), mu_h>).
//
//   MultiViewAccumulator streams the second moments C_ab = sum h_a h_b^T, C_cb, C_ca exactly
//   and keeps a bounded, seeded reservoir (Algorithm R) of raw observation triples for the
//   whitened third moment, which needs the whitening matrix known only at fit time. Raw
//   observations (3d doubles per triple) are stored rather than features (3D doubles): the
//   features are recomputed at fit time with the same map.
//
//   One feature map per accumulator: drawn once from the options at construction (or restored
//   from a snapshot), shared, immutable, by its snapshots and by the models fitted from them, so
//   the moments, the fit and every query see the same features (docs/algorithms.md §5.1).
//
//   LatentModel::Fit is pure: snapshot + options -> immutable model.
//
// INITIAL VALUE
//   triples() == 0, zero moments, empty reservoir, a new episode started.
//
// COST
//   Observe: O(dD) features + O(D^2) amortized (the moment updates are batched as one GEMM per
//   `batch` triples; with batch * D <= 16384 Eigen's packing buffers stay on the stack, so no
//   heap allocation). Memory O(D^2 + reservoir_size * 3d). Fit: O(D^3) (SVDs) +
//   O(reservoir * (dD + kD + k^3)) + O(L N k^4) for the tensor power method.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/embedding/feature_map.h"
#include "core/io/fwd.h"

namespace cmestream {

// Finite feature map of the latent model: what MakeLatentFeatureMap builds.
struct LatentFeatureOptions {
  using Kind = FeatureMap::Kind;
  Kind kind = Kind::kRff;
  int dim = 1;             // observation dimension d >= 1 (one-hot: d = 1, ids as doubles)
  int num_features = 200;  // RFF: D >= 1
  double sigma = 1.0;      // RFF: Gaussian kernel bandwidth > 0
  int num_symbols = 0;     // one-hot: D = num_symbols >= 2
  uint64_t seed = 1;       // RFF frequencies and phases
  absl::Status Validate() const;
  int size() const { return kind == Kind::kOneHot ? num_symbols : num_features; }
};

// requires: options.Validate().ok() (checked; aborts otherwise).
// ensures: FeatureMap::Rff(dim, num_features, sigma, seed) (docs/algorithms.md (3.1): the same
// seed gives the same features as the state embedding's map) or FeatureMap::OneHot(num_symbols).
// O(dD) for RFF; allocates the map.
std::shared_ptr<const FeatureMap> MakeLatentFeatureMap(const LatentFeatureOptions& options);

class MultiViewAccumulator {
 public:
  struct Options {
    LatentFeatureOptions features;
    int reservoir_size = 50000;   // triples kept for the third moment, >= 1
    uint64_t reservoir_seed = 7;  // seed of the reservoir sampler
    int batch = 32;               // triples per GEMM flush, 1 <= batch, batch * D <= 16384
    absl::Status Validate() const;
  };

  // requires options.Validate().ok(). Draws the feature map: MakeLatentFeatureMap(options.features).
  explicit MultiViewAccumulator(const Options& options);

  // Appends one observation (d doubles) to the current episode; from the third observation of
  // an episode on, each observation closes a triple (x_{t-1}, x_t, x_{t+1}). Bad input (not
  // finite; one-hot: not a symbol id) returns InvalidArgument (features().ValidatePoints's
  // message for one point) and changes nothing. No allocation.
  absl::Status Observe(const double* x);
  // Observe for a point already checked (features().ValidatePoints ok): the composite learner
  // validates a whole batch before applying any of it, so nothing is left to fail.
  void ObserveValidated(const double* x);
  // Validates all rows (the message names the first bad row), then observes them in order:
  // on error nothing changes.
  absl::Status ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x);
  // The next observation starts a new episode: no triple spans the boundary.
  void StartEpisode() { in_episode_ = 0; }

  int64_t triples() const { return triples_; }
  const Options& options() const { return options_; }
  const FeatureMap& features() const { return *map_; }

  // The accumulated statistics; Snapshot() returns an immutable copy.
  struct Statistics {
    std::shared_ptr<const FeatureMap> features;  // the accumulator's map (shared, immutable)
    int64_t triples = 0;
    MatrixXd C_ab, C_cb, C_ca;  // D x D sums (not yet divided by triples)
    RowMatrixXd reservoir;      // r x 3d rows [x_a, x_c, x_b], r = min(triples, reservoir_size)
  };
  // O(D^2 + r d); includes the triples not yet flushed.
  Statistics Snapshot() const;

  // Snapshot support (core/latent/multi_view_accumulator_io.cc; object tag "MVAC", version 2). Writes
  // the full per-sample state (the feature map's Omega and beta, pending triples, reservoir, the
  // reservoir RNG's std::mt19937_64 state) (no flush), so that Deserialize() followed by the
  // same calls gives results bit-identical to never having stopped. Deserialize also reads
  // version 1 (no stored map: its features are redrawn by LatentRffVersion1, the draw that
  // wrote it, core/latent/latent_rff_v1.h). It bounds every dimension by the stored options
  // before allocating; errors are DataLoss naming the source and offset (a bad tag or an
  // unknown version are named as such).
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<MultiViewAccumulator> Deserialize(io::Reader& r);

 private:
  MultiViewAccumulator(const Options& options, std::shared_ptr<const FeatureMap> map);  // Deserialize
  void Flush();

  Options options_;
  std::shared_ptr<const FeatureMap> map_;  // never null; options_.features describe it
  int D_ = 0, d_ = 0;
  int64_t triples_ = 0, in_episode_ = 0;
  MatrixXd feat_;          // D x 3, features of the last three observations (circular)
  RowMatrixXd raw_;        // 3 x d, the last three raw observations (circular)
  int slot_ = 0;           // slot of the most recent observation
  MatrixXd pa_, pb_, pc_;  // D x batch pending features
  int pending_ = 0;
  MatrixXd c_ab_, c_cb_, c_ca_;
  RowMatrixXd reservoir_;  // reservoir_size x 3d
  int64_t reservoir_fill_ = 0;
  std::mt19937_64 rng_;
};

class LatentModel {
 public:
  struct FitOptions {
    int k = 2;            // number of latent states, 1 <= k <= D
    int restarts = 20;    // L random starts per component
    int iterations = 30;  // N power iterations per start (and N more to refine)
    uint64_t seed = 11;   // starts of the tensor power method
    // Smallest eigenvalue of the symmetrized pair moment M2, relative to the largest, that we
    // accept; below it the k components are not identifiable from the data (FailedPrecondition).
    double min_relative_eigenvalue = 1e-8;
    int64_t min_triples = 10;
    absl::Status Validate() const;
  };
  struct Summary {
    VectorXd m2_eigenvalues;      // of the symmetrized, projected pair moment (descending)
    VectorXd tensor_eigenvalues;  // lambda_h in extraction order
    int64_t triples = 0, reservoir = 0;
    std::string BriefReport() const;
  };

  static absl::StatusOr<LatentModel> Fit(const MultiViewAccumulator::Statistics& s, const FitOptions& options);

  int k() const { return static_cast<int>(weights_.size()); }
  // Mixing weights pi_h = lambda_h^-2 normalized to the simplex; components sorted by
  // descending weight. raw_weights(): before normalization (sum ~ 1 when the model fits).
  const VectorXd& weights() const { return weights_; }
  const VectorXd& raw_weights() const { return raw_weights_; }
  // Component embeddings mu_h (D x k) in feature space.
  const MatrixXd& embeddings() const { return mu_; }
  // The feature map of the accumulator the model was fitted from (shared with its snapshot).
  const FeatureMap& features() const { return *features_; }
  // Component densities at points (n x d) -> n x k. RFF: <h(x), mu_h> / (2 pi sigma^2)^{d/2},
  // the Gaussian-smoothed density of component h (integrates to 1 in expectation); one-hot:
  // the probability of the symbol. Raw values, may be slightly negative (noise). Errors:
  // features().ValidatePoints's InvalidArgument. O(n (dD + Dk)), one GEMM for the features.
  absl::StatusOr<MatrixXd> Density(const Eigen::Ref<const RowMatrixXd>& points) const;
  // As Density, each column divided by its Riemann sum sum_j p(x_j|h) * cell_volume over the
  // points (a uniform evaluation grid), docs/algorithms.md (5.8) normalization.
  absl::StatusOr<MatrixXd> DensityNormalizedOnGrid(const Eigen::Ref<const RowMatrixXd>& points,
                                                   double cell_volume) const;
  // Reservoir read-out (no RFF noise floor): p(x|g) = lambda_g E[K_s(x, x_c) <zbar, v_g>] with
  // zbar the whitened symmetrized side views of each stored triple and K_s a normalized
  // Gaussian of bandwidth s > 0 (n x k).
  absl::StatusOr<MatrixXd> ReservoirDensity(const Eigen::Ref<const RowMatrixXd>& points, double bandwidth) const;
  // Binned (delta-kernel) read-out for d = 1: bins equal cells on [lo, hi); bins x k densities.
  absl::StatusOr<MatrixXd> BinnedDensity(double lo, double hi, int bins) const;
  // Posterior P(h | x) ∝ pi_h max(p(x|h), 0) (n x k rows on the simplex; uniform when all
  // densities are <= 0). readout_bandwidth == 0: p from Density() (O(D k) per point);
  // > 0: from ReservoirDensity() with that bandwidth (O(reservoir) per point, sharper: the RFF
  // read-out's noise floor leaks mass between components).
  absl::StatusOr<MatrixXd> Posterior(const Eigen::Ref<const RowMatrixXd>& points, double readout_bandwidth = 0) const;
  const Summary& summary() const { return summary_; }

 private:
  std::shared_ptr<const FeatureMap> features_;
  VectorXd weights_, raw_weights_;
  MatrixXd mu_;        // D x k
  RowMatrixXd res_x_;  // r x d, target views x_c of the reservoir
  MatrixXd res_w_;     // r x k, read-out weights lambda_g <zbar, v_g>
  Summary summary_;
};

}  // namespace cmestream
