// Sparse transition counts over a discretization (docs/algorithms.md §2).
//
// WHAT THIS OBJECT REPRESENTS
//   A streaming accumulator of (optionally exponentially forgotten) transition counts
//   N[i,j] between state ids i -> j, and visit counts n_i = sum_j N[i,j] (visits of i as the
//   source of a pair). Discrete models feed state ids in [0, P) directly; continuous models
//   feed the ids of the nearest dictionary X atoms of x and y (CompressedCme exposes them as
//   last_nearest_x() / last_nearest_y_in_x(), so no kernel value is recomputed). The state
//   count grows as ids appear (num_states() = 1 + largest id seen) and is bounded by
//   Options::max_states (m_max of the CME, or P).
//
//   Forgetting: with decay factor gamma in (0, 1], after t samples the weight of the sample
//   seen s steps ago is gamma^s, so N[i,j] = sum_t gamma^(T - t) [i_t = i, j_t = j]. This is
//   applied lazily: entries are stored in units of a growing global scale w = gamma^-T, each
//   sample adds w to its entry (O(1)), and reads divide by w. When w exceeds kRescaleAt every
//   stored value is divided by w and w resets to 1: O(nnz) once every
//   log(kRescaleAt)/(-log gamma) ~ 230/(1 - gamma) samples, i.e. O(1) amortized per sample.
//   Entries whose true value falls below kDropBelow are dropped at a rescale, so with
//   forgetting the stored pairs stay those seen in the last ~log(1/kDropBelow)/(1-gamma) samples.
//
// INITIAL VALUE
//   No states, no counts, samples() == 0, total_weight() == 0.
//
// COST
//   Add: O(deg(i)) (linear scan of row i's small sorted vector; deg(i) <= max_states).
//   A sample that repeats an existing (i, j) pair does not allocate; a first-seen (i, j)
//   pair inserts into row i's vector (amortized doubling), and total storage is bounded by
//   the number of distinct pairs <= max_states^2. Rows are reserved up front.
//   Snapshot: O(num_states + nnz).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

struct CountTriplet {
  int i = 0;
  int j = 0;
  double value = 0;  // forgotten count N[i,j]
};

// Row-stochastic estimate P_hat = diag(N 1)^-1 N; rows of unvisited states are all zero and
// flagged by visited[i] == false (P_hat is undefined there).
struct EmpiricalTransitionMatrix {
  MatrixXd P;                 // num_states x num_states
  std::vector<bool> visited;  // visited[i] <=> n_i > 0
};

// Dense count matrix over the states with data (row or column sum > 0), for the soft state
// aggregation of docs/algorithms.md §4. N[a,b] = N[states[a], states[b]].
struct DenseCounts {
  MatrixXd N;               // p x p
  std::vector<int> states;  // p original ids, increasing
};

// Immutable copy of the counts with their queries; never aliases the accumulator.
// Values are true (forgotten) counts, i.e. already divided by the global scale.
class CountsSnapshot {
 public:
  CountsSnapshot() = default;

  int num_states() const { return num_states_; }
  int64_t samples() const { return samples_; }           // raw number of pairs seen
  double total_weight() const { return total_weight_; }  // sum_ij N[i,j] (== samples w/o forgetting)
  int64_t nonzeros() const { return static_cast<int64_t>(col_.size()); }

  // N[i,j] (0 outside the known states).
  double Count(int i, int j) const;
  // n_i = sum_j N[i,j], size num_states.
  const VectorXd& visits() const { return visits_; }
  // All nonzero entries sorted by (i, j).
  std::vector<CountTriplet> Triplets() const;
  // Row i of P_hat (size num_states); ensures: zero vector if n_i == 0 (check visits()).
  VectorXd TransitionRow(int i) const;
  EmpiricalTransitionMatrix TransitionMatrix() const;
  // pi_hat ∝ n (sums to 1); all zeros when total_weight() == 0.
  VectorXd Stationary() const;
  DenseCounts Dense() const;

 private:
  friend class TransitionCounts;
  int num_states_ = 0;
  int64_t samples_ = 0;
  double total_weight_ = 0;
  // CSR layout: row i holds entries row_ptr_[i] .. row_ptr_[i+1]-1, columns increasing.
  std::vector<int64_t> row_ptr_{0};
  std::vector<int> col_;
  std::vector<double> val_;
  VectorXd visits_;
};

class TransitionCounts {
 public:
  struct Options {
    // Largest number of distinct states (ids in [0, max_states)); m_max or P. >= 1.
    int max_states = 1000;
    // Per-sample decay factor gamma in [1e-6, 1]; 1 = no forgetting. The weight of a sample
    // halves after log(1/2)/log(gamma) further samples.
    double forgetting = 1.0;
    // Entries reserved per row when a state first appears (avoids early reallocations). >= 0.
    int row_reserve = 8;

    // OK or InvalidArgument("Violated constraint: ...").
    absl::Status Validate() const;
  };

  // requires: options.Validate().ok() (checked; aborts otherwise — validate first).
  explicit TransitionCounts(const Options& options);

  // OK iff 0 <= i, j < max_states; otherwise InvalidArgument naming the offending id and the
  // valid range. Call before Add(): Add() does not check (hot path).
  absl::Status ValidatePair(int64_t i, int64_t j) const;
  // Validates every pair first; on error nothing is added (all-or-nothing).
  absl::Status AddBatch(const int64_t* i, const int64_t* j, int64_t n);

  // requires: ValidatePair(i, j).ok(). Adds one pair with weight 1 (after decaying the rest).
  void Add(int i, int j);

  const Options& options() const { return options_; }
  int num_states() const { return num_states_; }
  int64_t samples() const { return samples_; }
  // sum_ij N[i,j] in true units.
  double total_weight() const { return total_stored_ / scale_; }
  int64_t nonzeros() const { return nnz_; }
  // Current N[i,j] (O(deg(i))).
  double Count(int i, int j) const;
  // n_i (O(1)).
  double Visits(int i) const;
  // Calls f(j, N[i,j]) for every stored entry of row i (O(deg(i)), columns increasing; entries
  // below the rescale's drop level may be absent: they count as 0).
  template <class F>
  void ForEachInRow(int i, F&& f) const {
    if (i < 0 || i >= num_states_) return;
    for (const Entry& e : rows_[i]) f(e.j, e.stored / scale_);
  }

  CountsSnapshot Snapshot() const;

  // Snapshot support (core/counts/transition_counts_io.cc; object tag "CNTS", version 1). Writes
  // the full per-sample state (no flush, no re-factorization), so that Deserialize() followed
  // by the same calls gives results bit-identical to never having stopped. Deserialize bounds
  // every dimension by the stored options before allocating; errors are DataLoss naming the
  // source and offset (a bad tag or an unknown version are named as such).
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<TransitionCounts> Deserialize(io::Reader& r);

 private:
  struct Entry {
    int j;
    double stored;  // true value * scale_
  };
  static constexpr double kRescaleAt = 1e100;
  static constexpr double kDropBelow = 1e-12;  // true counts below this are dropped at a rescale
  void Rescale();

  Options options_;
  int num_states_ = 0;
  int64_t samples_ = 0;
  int64_t nnz_ = 0;
  double scale_ = 1;  // w = gamma^-t since the last rescale
  double inv_gamma_ = 1;
  double total_stored_ = 0;
  std::vector<std::vector<Entry>> rows_;  // max_states rows, sorted by j
  std::vector<double> visits_stored_;     // max_states
};

}  // namespace cmestream
