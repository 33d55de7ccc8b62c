// Moments at several lag times from one trajectory stream, split into contiguous time blocks
// for a delete-one-block jackknife (docs/algorithms.md §8).
//
// WHAT THIS OBJECT REPRESENTS
//   For lags tau_1 < ... < tau_L and a feature vector psi(x) in R^D supplied by the caller
//   (Koopman features [1, k_B(x)], or a one-hot state id for a count chain), the sums over all
//   pairs (x_s, x_t) with t - s = tau_k inside one episode:
//       C00_k = sum psi(x_s) psi(x_s)^T,  C0t_k = sum psi(x_s) psi(x_t)^T,
//       s0_k  = sum psi(x_s),             n_k   = number of such pairs,
//   each kept per contiguous time block b (the total is the sum over blocks).
//   Every lag has its own C00 (the source states of lag tau_k differ near episode starts).
//
// EPISODES
//   A ring buffer holds the features of the last tau_L states of the open episode. A state
//   pairs with its predecessors at every lag still inside the episode; StartEpisode() empties
//   the buffer, so pairs never cross an episode. Unordered pairs (ObservePair) have no
//   history: they feed lag 1 only (when 1 is one of the lags) and never touch the buffer.
//
// BLOCKS (why a jackknife over contiguous blocks)
//   Samples (states or pairs) go to the open block, in arrival order. When the open block
//   holds `block_length` samples it closes; when `max_blocks` blocks exist, neighbours are
//   merged pairwise (max_blocks / 2 blocks of twice the length) and the block length doubles.
//   So between max_blocks / 2 and max_blocks blocks of equal length (plus a partial open one)
//   exist at any time, with bounded memory and no random numbers: replay is bit-exact.
//   Contiguous blocks keep the autocorrelation of a time series inside each block, which a
//   per-pair (Poisson) bootstrap ignores (it under-covers on correlated samples).
//
// COST
//   Dense Observe: 2 L D^2 multiply-adds (two rank-1 updates per lag), no allocation.
//   One-hot Observe: O(L). A block merge is O(max_blocks L D^2), at most log2(n) times.
//   Memory: max_blocks * L * (2 D^2 + D + 1) doubles plus (tau_L + 1) D for the ring:
//   16 blocks, L = 4, D = 65: 4.4 MB. Linear in the number of lags.
//
// INITIAL VALUE
//   No samples, one empty open block of length options.initial_block_length, no open episode.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

// Sums of one lag in one block (or in total).
struct LagSums {
  MatrixXd c00, c0t;  // D x D
  VectorXd s0;        // D
  double n = 0;       // pairs
  void Resize(int d);
  void Add(const LagSums& o);
  void Subtract(const LagSums& o);
};

// Immutable copy for the estimators (core/validation/lag_estimate.h).
struct LaggedMomentsSnapshot {
  std::vector<int> lags;
  int dim = 0;
  bool one_hot = false;
  std::vector<LagSums> total;                // per lag
  std::vector<std::vector<LagSums>> blocks;  // [block][lag], blocks with samples only
  std::vector<int64_t> block_samples;        // samples per block
  int64_t samples = 0;                       // states + pairs observed
  int64_t trajectory_states = 0;             // states observed through Observe*
  int64_t unordered_pairs = 0;               // pairs observed through ObservePair*
};

class LaggedMoments {
 public:
  static constexpr int kMaxLag = 1000;  // documented maximum lag (memory of the ring)
  static constexpr int kMaxLags = 16;   // documented maximum number of lags
  struct Options {
    std::vector<int> lags = {1};        // positive, strictly increasing, <= kMaxLag, at most kMaxLags
    int dim = 1;                        // D, >= 1
    bool one_hot = false;               // features are state ids in [0, D) (count chain)
    int max_blocks = 16;                // even, >= 4
    int64_t initial_block_length = 64;  // >= 1
    // OK or InvalidArgument naming the violated constraint.
    absl::Status Validate() const;
  };

  // requires: options.Validate().ok() (checked; aborts otherwise).
  explicit LaggedMoments(const Options& options);

  // Closes the open episode: later states never pair with earlier ones. O(1).
  void StartEpisode();
  // Next state of the open episode. Dense: psi points to D doubles (finite; the caller
  // validates). One-hot: the state id in [0, D). No allocation.
  void Observe(const double* psi);
  void ObserveState(int id);
  // One unordered pair (x, y): feeds lag 1 if 1 is a lag; counts as a sample either way.
  void ObservePair(const double* psi_x, const double* psi_y);
  void ObservePairState(int i, int j);

  LaggedMomentsSnapshot Snapshot() const;

  const Options& options() const { return options_; }
  int64_t samples() const { return samples_; }
  int64_t trajectory_states() const { return trajectory_states_; }
  int64_t unordered_pairs() const { return unordered_pairs_; }
  int num_blocks() const { return num_blocks_; }
  int64_t block_length() const { return block_length_; }

  // Snapshot support (object tag "LAGM", version 1): the full state, so Deserialize followed
  // by the same calls is bit-identical to never having stopped.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<LaggedMoments> Deserialize(io::Reader& r);

 private:
  // The state's field list (CONTRIBUTING.md "Binary formats"), beside Serialize.
  template <class Fields, class Self>
  static void StateFields(Fields& f, Self& self);
  LagSums& Open(int lag_index) { return blocks_[num_blocks_ - 1][lag_index]; }
  void EndSample();                          // advances the block bookkeeping after one sample
  const double* RingAt(int64_t back) const;  // features of the state `back` steps ago

  Options options_;
  int lag1_ = -1;                             // index of lag 1 in lags, or -1
  std::vector<std::vector<LagSums>> blocks_;  // [max_blocks][L], first num_blocks_ in use
  std::vector<int64_t> block_samples_;        // max_blocks
  int num_blocks_ = 1;
  int64_t block_length_ = 1;
  int64_t samples_ = 0, trajectory_states_ = 0, unordered_pairs_ = 0;
  // Ring of the last tau_L + 1 states of the open episode (dense: D doubles each; one-hot: id).
  RowMatrixXd ring_;
  std::vector<int> ring_ids_;
  int64_t ring_head_ = 0;    // slot of the next state
  int64_t episode_len_ = 0;  // states in the open episode (capped use: only up to tau_L back)
};

}  // namespace cmestream
