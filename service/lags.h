// Lag scans, CK tests and their error bars for the service (docs/algorithms.md §8,
// docs/user-guide.md "Lag times and the CK test"): config validation of `lags`, which models
// keep lag statistics, the view built at refresh and the RPC replies.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "core/validation/lag_estimate.h"
#include "core/validation/lag_statistics.h"

namespace cmestream::service {

struct ModelView;

// Discrete models keep dense one-hot lag sums (P x P per lag and block): lag statistics
// exist for num_states <= kMaxLagStates (16 blocks x 4 lags x 2 x 128^2 doubles = 17 MB).
inline constexpr int kMaxLagStates = 128;
// Continuous models: the lag basis has at most this many atoms (docs/algorithms.md §8).
inline constexpr int kLagBasisAtoms = 32;
// Timescales per lag reported (slowest first).
inline constexpr int kLagTimescales = 3;
// Relative ridge of the Koopman lag estimate (the constant is never regularized).
inline constexpr double kLagRidge = 1e-8;

// Fills the default lags [1] and validates: each > 0, strictly increasing, <= LaggedMoments::
// kMaxLag, at most kMaxLags of them; discrete models with num_states > kMaxLagStates accept
// only the default. InvalidArgument naming the problem.
absl::Status NormalizeLags(v1::ModelConfig& c);
// True when the model keeps lag statistics (continuous, or num_states <= kMaxLagStates); the
// learner's options then carry the lags (LearnerOptionsFor, service/model_config.h).
bool HasLagStatistics(const v1::ModelConfig& c);

// Built at refresh from the model's LagStatistics snapshot (off the ingest path).
struct LagsView {
  LagStatisticsSnapshot stats;
  double dt = 1;
  std::optional<LagTimescales> koopman, counts;  // continuous: both; discrete: counts
  std::string error;                             // why there are no timescales (yet)
  // CK at the first lag with the view's metastable clusters and every step (for the gauges).
  std::optional<CkTest> ck_koopman, ck_counts;
  std::string ck_error;
};

void BuildLags(const v1::ModelConfig& config, const LagStatisticsSnapshot& snap, const ModelView& view, LagsView& out);

// RPC replies. FailedPrecondition (with the reason) when the view cannot answer.
absl::Status FillTimescales(const std::string& model, const LagsView& lags, v1::TimescalesResponse* resp);
// clusters 0: the model's; steps 0: every multiple of the lag; lag 0: the first lag.
absl::Status FillCkTest(const std::string& model, const v1::ModelConfig& config, const LagsView& lags,
                        const ModelView& view, uint32_t clusters, uint32_t steps, uint32_t lag,
                        v1::CkTestResponse* resp);

}  // namespace cmestream::service
