// Lag scans, CK tests and their error bars as a fitted view (docs/algorithms.md §8,
// docs/user-guide.md "Lag times and the CK test"): built at refresh from the learner's
// LagStatistics snapshot, off the ingest path, and re-run for a CK request with another K.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/cluster/metastable.h"
#include "core/embedding/state_embedding.h"
#include "core/validation/lag_estimate.h"
#include "core/validation/lag_statistics.h"

namespace cmestream {

// Discrete models keep dense one-hot lag sums (P x P per lag and block): lag statistics
// exist for num_states <= kMaxLagStates (16 blocks x 4 lags x 2 x 128^2 doubles = 17 MB).
inline constexpr int kMaxLagStates = 128;
// Continuous models: the lag basis has at most this many atoms (docs/algorithms.md §8).
inline constexpr int kLagBasisAtoms = 32;
// Timescales per lag reported (slowest first).
inline constexpr int kLagTimescales = 3;
// Relative ridge of the Koopman lag estimate (the constant is never regularized).
inline constexpr double kLagRidge = 1e-8;

struct LagsView {
  LagStatisticsSnapshot stats;
  double dt = 1;
  std::optional<LagTimescales> koopman, counts;  // continuous: both; discrete: counts
  std::string error;                             // why there are no timescales (yet)
  // CK at the first lag with the view's metastable clusters and every step (for the gauges).
  std::optional<CkTest> ck_koopman, ck_counts;
  std::string ck_error;
};

// The metastable sets a CK test coarse-grains with: the embedding and its clusters, or why
// there are none.
struct CkClusters {
  const StateEmbedding* embedding = nullptr;
  const MetastableClusters* clusters = nullptr;
  std::string missing;  // when either is null: why
};

// Both CK tests of one request: the count chain's always, the Koopman lag estimate's for
// continuous models.
struct CkPair {
  std::optional<CkTest> koopman, counts;
};

// `name` only prefixes error messages ("model 'x'"); `seed` re-clusters when k differs from the
// clusters' K.
LagsView FitLagsView(const LagStatisticsSnapshot& snap, double dt, const CkClusters& sets, int clusters, uint64_t seed,
                     const std::string& name);

// The CK test at `lag` with k metastable sets over up to `steps` multiples of it.
// FailedPrecondition with the reason when the view cannot answer; InvalidArgument for a k the
// representatives cannot support.
absl::StatusOr<CkPair> RunCkTests(const LagsView& lags, const CkClusters& sets, int k, int steps, int lag,
                                  uint64_t seed, const std::string& name);

// Why lags other than 1 have no pairs: the stream had no trajectories ("model 'x' was fed ...").
std::string PairsOnlyReason(const std::string& name, const LaggedMomentsSnapshot& s);

}  // namespace cmestream
