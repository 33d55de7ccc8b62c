// PerPairCost: which estimators a StreamingLearner runs, and the arithmetic each does per pair at
// the model's sizes (docs/benchmarks.md "Per-pair arithmetic of a model"). An estimate from the
// operation counts of docs/algorithms.md (multiply-adds of the dominant products; cosines of
// random features counted as one each), not a measurement: the bound a stream's measured rate
// is compared with.
#pragma once

#include <string>
#include <vector>

#include "core/stream/streaming_learner.h"

namespace cmestream {

struct EstimatorCost {
  std::string name;          // "input", "alarms", "cme", "counts", "embedding", "spectral", "lags", ...
  double multiply_adds = 0;  // per pair
  std::string formula;       // the count with its sizes, e.g. "3 m^2 + 2 m d (m = 1000, d = 32)"
};

// The estimators `options` make the learner run, in the order a pair meets them, at `atoms` X
// atoms (the CME's dictionary; <= 0: its cap, the bound of a model still in its warm-up) and
// a spectral basis of `spectral_basis` atoms (<= 0: as many as `atoms`, its bound; the basis is
// chosen at an epoch's start and re-based rarely, so it often stays well below the dictionary).
std::vector<EstimatorCost> PerPairCost(const StreamingLearner::Options& options, int atoms, int spectral_basis = 0);

}  // namespace cmestream
