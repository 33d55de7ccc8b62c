// CmeRun: one micro-batch of a continuous StreamingLearner (docs/algorithms.md §9.2). The CME
// learns pairs in runs of `run_pairs` consecutive pairs through CompressedCme::ObserveBatch
// (several times faster per pair than Observe); what reads the CME's dictionary as it was at a
// pair (the transition counts take its nearest atoms, the spectral moments' epochs follow its
// size, the continuous lag statistics re-pick their basis from its atoms) is recorded here as
// events in stream order and applied after the run's pairs, each event seeing the dictionary as
// it was at its place in the stream.
//
// WHY RUNS ON A GRID: ObserveBatch's arithmetic depends on where its calls begin and end. The
// learner applies a run right after its `run_pairs`-th pair and the lag pair or state that goes
// with that pair, so run boundaries fall on multiples of run_pairs of the learner's pair count,
// whatever the producers' batch sizes: the state stays a function of the pairs alone (bit-exact
// WAL replay, identical digests for a producer that resumes with other batch sizes). The open
// run is part of the learner's state (serialized) and is folded into copies for the views
// (StreamingLearner::CopyForSnapshot / SnapshotCopy::Finish).
//
// COST: storage for run_pairs pairs and up to 2 run_pairs + 1 lag states (d doubles each, at most
// ~4 MB each with the learner's run_pairs cap), allocated at first use, then no allocation. Apply is ObserveBatch plus
// one O(m) or O(m^2) step per event, as the sequential learner does per pair.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

class CompressedCme;
class TransitionCounts;
class SpectralMoments;
class LagStatistics;

// The estimators a run is applied to (the learner's own, or copies of them for a view). lags may
// be null (no lag statistics configured).
struct CmeRunTargets {
  CompressedCme* cme = nullptr;
  TransitionCounts* counts = nullptr;
  SpectralMoments* spectral = nullptr;
  LagStatistics* lags = nullptr;
};

// What applying a run changed that the learner reports per batch.
struct CmeRunEffects {
  int64_t spectral_epochs = 0;
  int64_t lag_rebases = 0;
  // The spectral moments' basis after the run (-1: no run applied). Read by the owner from the
  // run's report, never from the moments, which the events' lane may be changing meanwhile.
  int spectral_basis = -1;
};

class CmeRun {
 public:
  // requires: dim >= 1, run_pairs >= 1.
  CmeRun(int dim, int run_pairs);

  int dim() const { return dim_; }
  int run_pairs() const { return run_pairs_; }
  int pairs() const { return pairs_; }
  bool full() const { return pairs_ == run_pairs_; }
  bool empty() const { return events_.empty(); }
  bool has_lag_events() const;  // any event for the lag statistics (a restored run is checked)

  // Records, in stream order. requires: !full() for AddPair (the owner applies a full run first);
  // AddLagPair refers to the pair added last.
  void AddPair(const double* x, const double* y);
  void AddLagPair();
  void AddLagState(const double* state);
  void AddLagEpisode();

  // Applies the recorded events to `to` (see the top of this file) and empties the run. A view
  // folds the open run into copies of the estimators by applying a copy of the run.
  CmeRunEffects Apply(const CmeRunTargets& to);
  // Apply in two steps, which a learner may run on two threads (docs/algorithms.md §9.3):
  // ApplyToCme learns the run's pairs into the CME and records what the events need of it (the
  // nearest atoms and the dictionary size at each pair); ApplyEvents then applies the events to
  // the other targets, reading of the CME only its first X atoms (CompressedCme::first_x_atoms),
  // and empties the run. Between the two the CME may learn further runs of at most P pairs
  // while ApplyEvents runs on another thread if HasRoomFor(P) held before they began.
  void ApplyToCme(CompressedCme& cme);
  CmeRunEffects ApplyEvents(const CmeRunTargets& to);
  // What the last ApplyEvents (or Apply) did; kept after the run is emptied.
  const CmeRunEffects& applied_effects() const { return applied_effects_; }

  // Row i < pairs() of the run's x and y (as added).
  const double* x_row(int i) const { return x_.row(i).data(); }
  const double* y_row(int i) const { return y_.row(i).data(); }

  // Part of StreamingLearner's state (version 4): pairs, lag states, events.
  void Serialize(io::Writer& w) const;
  // Reads what Serialize wrote into an empty run with this dim and run_pairs; counts and event
  // indices are checked against them (DataLoss naming the part otherwise, via the reader).
  bool Deserialize(io::Reader& r);

 private:
  enum Kind : uint8_t { kPair = 1, kLagPair = 2, kLagState = 3, kLagEpisode = 4 };
  struct Event {
    Kind kind;
    int32_t index;  // pair row (kPair, kLagPair) or state row (kLagState)
  };
  void Allocate(RowMatrixXd& m, int rows) const;
  void Clear();

  int dim_;
  int run_pairs_;
  int pairs_ = 0;
  int states_ = 0;
  RowMatrixXd x_, y_;  // run_pairs x dim once a pair was added
  RowMatrixXd state_;  // 2 run_pairs + 1 rows x dim once a lag state was added
  std::vector<Event> events_;
  std::vector<int> scratch_;  // 3 run_pairs: nearest X atoms of x and y, m_x after each pair
  int dict_before_ = 0;       // m_x before the run's first pair (ApplyToCme)
  bool learned_ = false;      // ApplyToCme ran, ApplyEvents has not
  CmeRunEffects applied_effects_;
};

}  // namespace cmestream
