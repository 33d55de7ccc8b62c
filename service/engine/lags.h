// Lag scans, CK tests and their error bars for the service (docs/algorithms.md §8,
// docs/user-guide.md "Lag times and the CK test"): config validation of `lags`, which models
// keep lag statistics, and the RPC replies. The view itself is fitted in core
// (core/stream/lags_view.h).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "core/stream/lags_view.h"

namespace cmestream::service {

struct ModelView;

// Fills the default lags [1] and validates: each > 0, strictly increasing, <= LaggedMoments::
// kMaxLag, at most kMaxLags of them; discrete models with num_states > kMaxLagStates accept
// only the default. InvalidArgument naming the problem.
absl::Status NormalizeLags(v1::ModelConfig& c);
// True when the model keeps lag statistics (continuous, or num_states <= kMaxLagStates); the
// learner's options then carry the lags (LearnerOptionsFor, service/engine/model_config.h).
bool HasLagStatistics(const v1::ModelConfig& c);

// RPC replies. FailedPrecondition (with the reason) when the view cannot answer.
absl::Status FillTimescales(const std::string& model, const LagsView& lags, v1::TimescalesResponse* resp);
// clusters 0: the model's; steps 0: every multiple of the lag; lag 0: the first lag.
absl::Status FillCkTest(const std::string& model, const v1::ModelConfig& config, const LagsView& lags,
                        const ModelView& view, uint32_t clusters, uint32_t steps, uint32_t lag,
                        v1::CkTestResponse* resp);

}  // namespace cmestream::service
