#include "core/stream/cme_run.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/cme/compressed_cme.h"
#include "core/counts/transition_counts.h"
#include "core/io/binary_io.h"
#include "core/spectral/spectral_moments.h"
#include "core/validation/lag_statistics.h"

namespace cmestream {
namespace {

// Lag states of one run: the trajectory state after each pair, and the first state of an
// episode starting before a pair (one more kept as slack).
int MaxStates(int run_pairs) { return 2 * run_pairs + 1; }
// Events of one run: per pair the pair, a lag pair or state, an episode start and its state.
int MaxEvents(int run_pairs) { return 4 * run_pairs + 2; }

}  // namespace

CmeRun::CmeRun(int dim, int run_pairs) : dim_(dim), run_pairs_(run_pairs) {
  if (dim < 1 || run_pairs < 1) std::abort();                  // a programming error: the learner validated
  events_.reserve(static_cast<size_t>(MaxEvents(run_pairs)));  // small: 8 bytes an event
  scratch_.assign(static_cast<size_t>(3) * run_pairs, 0);
}

void CmeRun::Allocate(RowMatrixXd& m, int rows) const {
  // Full size at first use (once per learner): a model that never learns holds no buffer, and
  // no later event allocates. Rows held so far are kept.
  if (m.rows() < rows) m.conservativeResize(rows, dim_);
}

void CmeRun::AddPair(const double* x, const double* y) {
  if (full() || learned_) std::abort();  // the owner applies a full run (wholly) before the next pair
  Allocate(x_, run_pairs_);
  Allocate(y_, run_pairs_);
  std::copy(x, x + dim_, x_.row(pairs_).data());
  std::copy(y, y + dim_, y_.row(pairs_).data());
  events_.push_back({kPair, pairs_});
  ++pairs_;
}

void CmeRun::AddLagPair() {
  if (pairs_ == 0) std::abort();  // refers to the pair added last
  events_.push_back({kLagPair, pairs_ - 1});
}

void CmeRun::AddLagState(const double* state) {
  if (states_ == MaxStates(run_pairs_)) std::abort();  // bounded by construction (MaxStates)
  Allocate(state_, MaxStates(run_pairs_));
  std::copy(state, state + dim_, state_.row(states_).data());
  events_.push_back({kLagState, states_});
  ++states_;
}

void CmeRun::AddLagEpisode() { events_.push_back({kLagEpisode, 0}); }

bool CmeRun::has_lag_events() const {
  return std::any_of(events_.begin(), events_.end(), [](const Event& e) { return e.kind != kPair; });
}

void CmeRun::Clear() {
  learned_ = false;
  pairs_ = 0;
  states_ = 0;
  events_.clear();  // keeps the capacity
}

CmeRunEffects CmeRun::Apply(const CmeRunTargets& to) {
  ApplyToCme(*to.cme);
  return ApplyEvents(to);
}

void CmeRun::ApplyToCme(CompressedCme& cme) {
  if (learned_) std::abort();  // a programming error: ApplyEvents empties the run first
  int* nearest_x = scratch_.data();
  int* nearest_y = nearest_x + run_pairs_;
  int* dict_x = nearest_y + run_pairs_;
  // The X dictionary size at the current event: before the run's first pair, the CME's size now.
  dict_before_ = cme.dict_x_size();
  learned_ = true;
  if (pairs_ == 0) return;
  if (run_pairs_ == 1) {
    // One pair per run is the sequential recursion itself (bit-identical to Observe).
    cme.Observe(x_.row(0).data(), y_.row(0).data());
    nearest_x[0] = cme.last_nearest_x();
    nearest_y[0] = cme.last_nearest_y_in_x();
    dict_x[0] = cme.dict_x_size();
  } else {
    cme.ObserveBatch(x_.topRows(pairs_), y_.topRows(pairs_), absl::MakeSpan(nearest_x, pairs_),
                     absl::MakeSpan(nearest_y, pairs_), absl::MakeSpan(dict_x, pairs_));
  }
}

CmeRunEffects CmeRun::ApplyEvents(const CmeRunTargets& to) {
  if (!learned_) std::abort();  // a programming error: ApplyToCme first
  CmeRunEffects effects;
  const int* nearest_x = scratch_.data();
  const int* nearest_y = nearest_x + run_pairs_;
  const int* dict_x = nearest_y + run_pairs_;
  int dict = dict_before_;
  // Atoms are only appended, so the dictionary at an event is a prefix of the one now.
  auto sync_lag_basis = [&] {
    if (to.lags->NeedsRebase(to.spectral->epoch())) {
      to.lags->Rebase(to.cme->first_x_atoms(dict), to.spectral->epoch());
      ++effects.lag_rebases;
    }
  };
  for (const Event& e : events_) {
    switch (e.kind) {
      case kPair: {
        const int i = e.index;
        dict = dict_x[i];
        // The count chain's states are the CME's nearest X atoms of x and y (docs/algorithms.md §2).
        if (nearest_x[i] >= 0 && nearest_y[i] >= 0) to.counts->Add(nearest_x[i], nearest_y[i]);
        // The spectral basis follows the X dictionary by epochs (§7), checked at every pair.
        if (to.spectral->ShouldStartEpoch(dict)) {
          to.spectral->StartEpoch(to.cme->first_x_atoms(dict));
          ++effects.spectral_epochs;
        }
        to.spectral->Observe(x_.row(i).data(), y_.row(i).data());
        break;
      }
      case kLagPair:
        sync_lag_basis();
        to.lags->ObservePair(x_.row(e.index).data(), y_.row(e.index).data());
        break;
      case kLagState:
        sync_lag_basis();
        to.lags->ObserveState(state_.row(e.index).data());
        break;
      case kLagEpisode:
        to.lags->StartEpisode();
        break;
    }
  }
  Clear();
  effects.spectral_basis = to.spectral->basis_size();
  applied_effects_ = effects;
  return effects;
}

void CmeRun::Serialize(io::Writer& w) const {
  io::WriteFilledRows(w, pairs_, x_, y_);
  io::WriteFilledRows(w, states_, state_);
  w.I64(static_cast<int64_t>(events_.size()));
  for (const Event& e : events_) {
    w.U8(e.kind);
    w.I32(e.index);
  }
}

bool CmeRun::Deserialize(io::Reader& r) {
  Clear();
  const int64_t pairs = r.Count("model CME run pairs", 0, run_pairs_);
  if (!r.ok()) return false;
  if (pairs > 0) {
    Allocate(x_, run_pairs_);
    Allocate(y_, run_pairs_);
    r.MatrixInto("model CME run x", x_.topRows(pairs));
    r.MatrixInto("model CME run y", y_.topRows(pairs));
  }
  const int64_t states = r.Count("model CME run lag states", 0, MaxStates(run_pairs_));
  if (!r.ok()) return false;
  if (states > 0) {
    Allocate(state_, MaxStates(run_pairs_));
    r.MatrixInto("model CME run lag states", state_.topRows(states));
  }
  const int64_t events = r.Count("model CME run events", 0, MaxEvents(run_pairs_));
  if (!r.ok()) return false;
  // Pairs appear in order 0, 1, ...; a lag pair refers to the pair before it; lag states in order.
  int next_pair = 0, next_state = 0;
  for (int64_t k = 0; k < events && r.ok(); ++k) {
    const uint8_t kind = r.U8("model CME run event kind");
    const int32_t index = r.I32("model CME run event index");
    if (!r.ok()) break;
    bool valid = true;
    switch (kind) {
      case kPair:
        valid = index == next_pair++;
        break;
      case kLagPair:
        valid = next_pair > 0 && index == next_pair - 1;
        break;
      case kLagState:
        valid = index == next_state++;
        break;
      case kLagEpisode:
        valid = index == 0;
        break;
      default:
        valid = false;
    }
    if (!valid) {
      (void)r.Fail(absl::StrCat("model CME run event ", k, " (kind ", kind, ", index ", index,
                                ") is out of order or unknown, expected pairs and lag states in stream order"));
      break;
    }
    events_.push_back({static_cast<Kind>(kind), index});
  }
  if (r.ok() && (next_pair != pairs || next_state != states)) {
    (void)r.Fail(absl::StrCat("model CME run has ", pairs, " pairs and ", states, " lag states but its events name ",
                              next_pair, " and ", next_state));
  }
  if (!r.ok()) {
    Clear();
    return false;
  }
  pairs_ = static_cast<int>(pairs);
  states_ = static_cast<int>(states);
  return true;
}

}  // namespace cmestream
