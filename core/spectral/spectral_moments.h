// Exact streaming spectral moments in a fixed kernel basis (docs/algorithms.md §7).
//
// WHAT THIS OBJECT REPRESENTS
//   The sufficient statistics of a consistent Koopman / VAMP estimate from a stream of pairs
//   (x_t, y_t): with features psi(x) = [1, k_B(x)^T]^T over a basis B of m X-atoms (the
//   constant plus one Gaussian bump per atom) and weights w_t = gamma^(n - t) (forgetting),
//       C00 = sum w psi(x) psi(x)^T,  C01 = sum w psi(x) psi(y)^T,  C11 = sum w psi(y) psi(y)^T,
//       n_w = sum w.
//   The sums are split by contiguous blocks of `block_length` samples into two folds (blocks
//   alternate A, B, A, B, ...), so that the refresh can choose its regularizer by a held-out
//   score on contiguous blocks (shuffled pairs leak on time series) and report that score; the
//   full moments are fold A + fold B.
//
// EPOCHS (nested)
//   The basis is fixed during an epoch: moments for an atom admitted at t_a would miss every
//   sample before t_a and bias the estimate. The owner asks ShouldStartEpoch(source_atoms) after
//   each sample (O(1)); when the atoms of the source dictionary outside the basis exceed
//   new_atom_fraction of it, StartEpoch(source_atoms) copies the source's atoms and restarts the
//   sums. The CME's dictionary only grows (atoms are appended, never moved or removed), so the
//   old basis is a PREFIX of the new one, and the old features' moments over the new epoch's
//   pairs are the top-left (m_old + 1)^2 blocks of the new sums. Nothing of the past is thrown
//   away for that basis: the frozen sums of the earlier pairs (over a prefix basis) plus the
//   live epoch's prefix blocks are the moments of every pair since the frozen sums began. The
//   estimator (spectral_estimate.h) weighs the two candidates by a held-out score:
//     live:   the full basis over the live epoch's pairs only;
//     prefix: the frozen prefix basis over the frozen pairs and the live epoch's pairs.
//   At the next StartEpoch only one can stay frozen: the live epoch (bigger basis) if its
//   weight is at least the frozen weight, else the prefix merge (frozen + live prefix blocks).
//   So a restart never discards more than half of the weighted pairs the candidates rest on
//   (the previous rule dropped the whole earlier epoch: a third of the pairs for a four-well
//   stream whose dictionary grew 41 -> 46 atoms at pair 34 951 of 100k).
//   StartEpoch with atoms that do NOT extend the basis (not the CME's case) starts over: no
//   earlier sums can be expressed in the new basis.
// RE-BASE SCHEDULE (landmark basis, re-based rarely)
//   A dictionary that keeps growing (a real stream that keeps exploring: 12-month delay vectors
//   of sunspot numbers, an 8-channel sensor stream) used to restart the epoch at every 10 % of
//   growth: 46-49 epochs, none with enough pairs to serve. The basis is now a landmark set
//   re-based rarely: besides the outgrowth, a new epoch needs samples() >= rebase_growth x the
//   pairs observed before the live epoch began (default 5). So the live epoch holds at least
//   1 - 1/rebase_growth (80 %) of all pairs when it is frozen, the frozen epoch is always the
//   previous live one, and the prefix candidate (frozen + live prefix blocks) keeps >= 80 % of
//   the stream at every moment; epochs start at geometrically spaced pair counts (about
//   log_5(n) of them: 6 at 3 165 pairs, 8 at 100k). The atoms admitted between re-bases wait
//   for the next one (their region is covered by the constant and the neighbouring bumps).
//   Each epoch's held-out blocks are clamp(pairs before it / 4, min_block_length,
//   block_length) long, so an epoch begun at pair s has ~16 blocks by pair 5 s and a stream of
//   100 pairs has both folds.
// STATIONARITY
//   Besides the moments, the sources x are summed per contiguous time block (16 blocks at most,
//   merged pairwise with the block length doubling from 16, as the lag jackknife does: 8-16
//   equal blocks). The Koopman reply reads a trend or drifting mean from them
//   (spectral_summary.h). O(d) per pair, 2 * 16 * d doubles. Counted from the first pair (also
//   before the first epoch); version-1 snapshots load with empty blocks.
// COST
//   Observe: O(d) copy into a B x d buffer; every B samples (or at a block end) one flush: the
//   B x m kernel block is one GEMM plus exp, the sums are two symmetric rank-B updates and one
//   GEMM: ~3 (m+1)^2 multiply-adds per sample amortized. No heap allocation after the epoch
//   started (scratch sized at StartEpoch). StartEpoch allocates the epoch's sums (rare).
//   Memory: 6 (m+1)^2 doubles for the live epoch and at most as many for the frozen one
//   (12 (m+1)^2 doubles: 19 MB at m = 400, 96 MB at m = 1000). StartEpoch's prefix merge adds
//   into the frozen sums in place (O(m^2), rare).
//
// FORGETTING
//   Lazy, as in EmbeddingMoments: sums are stored in units of a per-epoch scale u = gamma^-t,
//   a sample adds weight u, reads divide by u, and the epoch's sums are renormalized when
//   u > 1e100 (O(m^2), once every ~230/(1 - gamma) samples). The frozen sums end where the
//   live epoch begins, so they are read decayed by gamma^(live epoch samples) (computed at
//   Snapshot and at the merge, not stored): frozen and live pairs keep their true relative
//   weights.
//
// INITIAL VALUE
//   No epoch (epoch() == 0, basis_size() == 0); Observe before the first StartEpoch only
//   counts the sample (there is no basis yet).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

// One epoch's moments, normalized to true (forgotten) sums. Fold f in {0, 1}.
struct SpectralEpochMoments {
  int64_t epoch = 0;    // 1, 2, ... (0: none)
  int64_t samples = 0;  // pairs observed in this epoch
  // std::array, not C arrays: the implicit copy of a C array member is a loop over an
  // identifier clang-tidy flags as reserved (bugprone-reserved-identifier).
  std::array<int64_t, 2> fold_samples = {0, 0};
  std::array<double, 2> n = {0, 0};       // sum of weights per fold
  std::array<MatrixXd, 2> c00, c01, c11;  // (m+1) x (m+1) each, symmetric ones full
  double total_weight() const { return n[0] + n[1]; }
};

// Immutable copy of what the estimator needs (never aliases the accumulator).
struct SpectralMomentsSnapshot {
  int dim = 0;
  double sigma = 1;
  RowMatrixXd basis;             // m x d atoms of the live epoch
  SpectralEpochMoments moments;  // the live epoch (full basis)
  bool ready = false;            // the live epoch has >= min_epoch_samples and both folds
  // The frozen sums of the pairs before the live epoch over the first prefix_size atoms of
  // `basis` (a prefix; 0 and frozen.epoch == 0 when there are none), decayed to now. The prefix
  // candidate of the estimator is frozen + the live moments' top-left (prefix_size + 1)^2 blocks.
  int prefix_size = 0;
  SpectralEpochMoments frozen;
  int64_t live_epoch = 0;  // the epoch accumulating now (== moments.epoch)
  int64_t live_epoch_samples = 0;
  int64_t samples = 0;  // all pairs ever observed
  // Contiguous time blocks of the sources x (STATIONARITY): per block (oldest first) the pair
  // count, the mean and the mean of squares of each coordinate (blocks with pairs only).
  std::vector<int64_t> drift_counts;
  RowMatrixXd drift_means, drift_square_means;  // blocks x d
  int64_t min_epoch_samples = 1;                // a candidate is ready from this many pairs (and both folds)
  bool has_frozen() const { return frozen.epoch > 0; }
};

class SpectralMoments {
 public:
  struct Options {
    int dim = 0;                     // state dimension d, >= 1
    double sigma = 1;                // Gaussian bandwidth of the basis bumps, > 0
    int max_basis = 1000;            // cap on m (the CME's max_dict), >= 1
    int batch_size = 64;             // B, pairs per GEMM flush, >= 1
    int64_t block_length = 1000;     // L, samples per contiguous held-out block, >= 1
    double forgetting = 1.0;         // per-sample decay gamma in (0, 1]; 1 = none
    double new_atom_fraction = 0.1;  // epoch restart when (m_source - m) > f * m_source, (0, 1)
    // An epoch serves from this many samples on (and both folds), >= 1. The daemon's models use
    // 50 (core/stream/streaming_learner_options.cc): a short stream gets the estimate, noisily.
    int64_t min_epoch_samples = 2000;
    // Rare re-bases (RE-BASE SCHEDULE above): a new epoch starts only when, besides the
    // outgrowth, the pairs observed reach rebase_growth x the pairs before the live epoch
    // began. 1: at every outgrowth (what snapshots of version 1 do); the daemon's models use 5
    // (core/stream/streaming_learner_options.cc). >= 1.
    double rebase_growth = 1;
    // Block length of an epoch: clamp(pairs before it / 4, min_block_length, block_length), so
    // that an epoch begun early on a short stream has both folds within a few dozen pairs.
    // >= block_length: fixed blocks (version 1); the daemon's models use 25. >= 1.
    int64_t min_block_length = 1000;
    // OK or InvalidArgument("Violated constraint: ...").
    absl::Status Validate() const;
  };

  // requires: options.Validate().ok() (checked; aborts otherwise).
  explicit SpectralMoments(const Options& options);

  // Fixes atoms that lead every basis, before the source's (landmarks.h, docs/algorithms.md
  // §7.2): the basis is the first max_basis rows of [landmarks; source atoms]. Kept across
  // epochs and snapshots. requires: no epoch yet, landmarks.cols() == dim, finite.
  void SetLandmarks(const Eigen::Ref<const RowMatrixXd>& landmarks);
  // True when the source dictionary has m_source atoms, more than the current basis was built
  // from, the basis is below max_basis, and either there is no basis yet or the new atoms
  // (n_new) outgrow it, n_new > new_atom_fraction * min(m + n_new, max_basis), with the
  // stream grown since the live epoch began (samples() >= rebase_growth x the pairs before
  // it). Without landmarks, the basis is the source's first atoms (EPOCHS). O(1).
  bool ShouldStartEpoch(int source_atoms) const;
  // Flushes the buffered pairs into the current epoch, freezes the live epoch or the prefix
  // merge (see EPOCHS), takes as the new basis the first max_basis rows of [landmarks; the
  // source atoms that are not within 0.045 sigma of a landmark (an exact or near copy of a
  // feature, which leaves the Gram singular)] and starts empty sums. A basis whose first
  // basis_size() rows differ from the current one drops the frozen sums.
  // requires: cols() == dim, atoms finite.
  void StartEpoch(const Eigen::Ref<const RowMatrixXd>& source_atoms);

  // Adds one pair. x, y: d finite doubles each (the caller validates). No allocation.
  void Observe(const double* x, const double* y);
  // Validates shapes and finiteness (all-or-nothing), then observes the rows in order.
  absl::Status ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y);

  // Copies the live epoch's and the frozen moments out (the buffered pairs folded into a copy:
  // this object does not change, so refresh timing never alters the summation order).
  SpectralMomentsSnapshot Snapshot() const;

  const Options& options() const { return options_; }
  int64_t samples() const { return samples_; }
  int64_t epoch() const { return live_.epoch; }
  int64_t epoch_samples() const { return live_.samples; }
  int basis_size() const { return m_; }
  int landmarks() const { return static_cast<int>(landmarks_.rows()); }
  int buffered() const { return buffered_; }
  int64_t block_length() const { return live_block_; }  // of the live epoch
  bool has_previous() const { return previous_.has_value(); }
  int previous_basis_size() const { return previous_ ? static_cast<int>(previous_->basis.rows()) : 0; }

  // Snapshot support (core/spectral/spectral_moments_io.cc; object tag "SPMO", version 1). Writes
  // the full state (no flush), so Deserialize followed by the same calls is bit-identical to
  // never having stopped. Deserialize bounds every dimension by the stored options first.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<SpectralMoments> Deserialize(io::Reader& r);

 private:
  // Live sums of one epoch in units of its scale (lower triangles for c00, c11).
  struct Epoch {
    int64_t epoch = 0;
    int64_t samples = 0;
    std::array<int64_t, 2> fold_samples = {0, 0};
    double scale = 1;  // u = gamma^-t within the epoch
    std::array<double, 2> n = {0, 0};
    std::array<MatrixXd, 2> c00, c01, c11;
  };
  struct Frozen {
    RowMatrixXd basis;
    Epoch sums;
  };

  bool Ready(const Epoch& e) const;
  void ComputeBasisSquaredNorms();  // basis_sq_ from basis_, alignment-independent
  // Held-out block length of an epoch that begins after `before` pairs (RE-BASE SCHEDULE).
  int64_t EpochBlockLength(int64_t before) const;
  int Fold(const Epoch& e) const;  // fold of the next sample of e
  void Flush();
  // Folds the buffered_ pairs into e using the given scratch (Flush: the members; Snapshot: copies).
  void FlushInto(Epoch& e, RowMatrixXd& px, RowMatrixXd& py, VectorXd& w, VectorXd& sqx, VectorXd& sqy) const;
  void Rescale(Epoch& e) const;
  static SpectralEpochMoments Normalized(const Epoch& e);
  // gamma^(live epoch samples): the decay of the frozen sums since they were frozen.
  double FrozenDecay() const;

  Options options_;
  double inv_gamma_ = 1;
  int64_t samples_ = 0;
  int m_ = 0;
  RowMatrixXd basis_;      // m x d
  VectorXd basis_sq_;      // m: squared norms of the atoms
  RowMatrixXd landmarks_;  // the basis's fixed leading rows (SetLandmarks), 0 x d when none
  int considered_ = 0;     // source atoms the live basis was built from (kept or not)
  // A source atom closer than sqrt(kNearLandmark) sigma to a landmark is left out of the basis
  // (its feature is within 0.1 % of the landmark's: k > 0.999).
  static constexpr double kNearLandmark = 0.002;
  bool NearLandmark(const double* atom) const;
  Epoch live_;
  // Drift blocks (STATIONARITY): rows 0..drift_blocks_-1 in use, the last one open.
  static constexpr int kDriftBlocks = 16;
  static constexpr int64_t kDriftFirstBlockLength = 16;
  void ObserveDrift(const double* x);
  RowMatrixXd drift_sum_, drift_sq_;  // kDriftBlocks x d
  std::array<int64_t, kDriftBlocks> drift_count_{};
  int drift_blocks_ = 1;
  int64_t drift_block_length_ = kDriftFirstBlockLength;
  int64_t live_block_ = 1;  // block length of the live epoch (derived: EpochBlockLength)
  // Sums of the pairs just before the live epoch over a prefix of basis_ (see EPOCHS).
  std::optional<Frozen> previous_;
  // Per-batch scratch (not state): sized at StartEpoch.
  RowMatrixXd xbuf_, ybuf_;    // B x d
  RowMatrixXd px_, py_;        // B x (m+1): sqrt(w) psi(x), sqrt(w) psi(y)
  VectorXd wbuf_, sqx_, sqy_;  // B
  int buffered_ = 0;
};

}  // namespace cmestream
