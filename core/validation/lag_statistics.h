// What a model keeps for lag scans, CK tests and error bars (docs/algorithms.md §8): the
// LaggedMoments of a Koopman basis and of the count chain on the same states.
//
// WHAT THIS OBJECT REPRESENTS
//   Discrete models: one-hot lagged counts over the ids [0, num_states) (the count chain).
//   Continuous models: a lag basis B of at most max_basis atoms picked from the CME's X
//   dictionary by farthest-point sampling (spread over the explored region, deterministic),
//   bandwidth sigma_B = max(sigma, mean nearest-neighbour distance in B) so the bumps overlap;
//   features psi(x) = [1, k_B(x)] (LaggedMoments "koopman") and the count-chain state
//   argmax_j k_B(x)_j, the nearest basis atom (LaggedMoments "counts"). The basis is fixed per
//   epoch: Rebase(atoms, epoch) picks a new one and restarts both sums when the owner's source
//   epoch changes (the spectral moments' epoch, which follows the dictionary's growth), so
//   statistics never mix bases. States seen before the first Rebase are not counted.
//
// COST per state: max_basis kernel evaluations plus the LaggedMoments updates,
//   2 L (max_basis + 1)^2 multiply-adds (Koopman) + O(L) (counts); no allocation.
//   Memory: ~max_blocks x L x 2 x ((max_basis + 1)^2 + max_basis^2) doubles: 2.2 MB at L = 4, 16 blocks,
//   max_basis 32; 0.54 MB per lag.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/validation/lagged_moments.h"

namespace cmestream {

struct LagStatisticsSnapshot {
  bool discrete = false;
  int64_t epoch = 0;                             // source epoch of the basis (continuous)
  RowMatrixXd basis;                             // continuous: k x d atoms
  std::vector<int> basis_atoms;                  // their indices in the source dictionary
  double sigma = 0;                              // sigma_B
  std::optional<LaggedMomentsSnapshot> koopman;  // continuous only, once a basis exists
  std::optional<LaggedMomentsSnapshot> counts;   // once a basis exists (discrete: always)
  // Features of points (rows) in the Koopman basis: n x (k + 1).
  MatrixXd Features(const Eigen::Ref<const RowMatrixXd>& points) const;
};

class LagStatistics {
 public:
  struct Options {
    std::vector<int> lags = {1};
    int dim = 0;         // continuous state dimension (0: discrete)
    int num_states = 0;  // discrete: ids in [0, num_states)
    double sigma = 1;    // the model's kernel bandwidth (continuous)
    int max_basis = 32;  // lag basis size cap, >= 2
    int max_blocks = 16;
    int64_t initial_block_length = 64;
    absl::Status Validate() const;
  };
  explicit LagStatistics(const Options& options);  // requires Validate().ok()

  // Continuous: true when the basis was taken at another source epoch. O(1).
  bool NeedsRebase(int64_t source_epoch) const { return !discrete() && source_epoch != epoch_; }
  // Picks the basis from the source atoms (m x dim) and restarts the sums. Allocates (rare).
  void Rebase(const Eigen::Ref<const RowMatrixXd>& atoms, int64_t source_epoch);

  void StartEpisode();
  // Next state of the open episode: dim doubles (continuous) or one id as a double (discrete).
  void ObserveState(const double* x);
  // Unordered pair: lag 1 only.
  void ObservePair(const double* x, const double* y);

  LagStatisticsSnapshot Snapshot() const;
  const Options& options() const { return options_; }
  bool discrete() const { return options_.dim == 0; }
  bool has_basis() const { return counts_.has_value(); }

  void Serialize(io::Writer& w) const;  // object "LAGS", version 1
  static absl::StatusOr<LagStatistics> Deserialize(io::Reader& r);

 private:
  // Fills psi_ (continuous) and returns the count-chain state.
  int Featurize(const double* x);

  Options options_;
  int64_t epoch_ = 0;
  RowMatrixXd basis_;
  std::vector<int> basis_atoms_;
  double sigma_b_ = 0;
  std::optional<LaggedMoments> koopman_, counts_;
  VectorXd psi_, psi2_;  // scratch (not state)
};

}  // namespace cmestream
