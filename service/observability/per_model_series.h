// --metrics-per-model (service/README.md "Metrics"): which models have Prometheus series with a
// `model` label. A fleet of 10,000 models has ~30 series each; a user keeps them all, none (the
// fleet series stay), or those of the N models that matter now.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace cmestream::service {

// --metrics-per-model: which models have series with a `model` label. all: every model; none:
// no model (the fleet series stay); top N: at most N models, re-ranked every kTopRankSeconds by
// the change alarms then the pairs each raised and learned since the last ranking (a model
// without series keeps its values, and shows them all, its counters' totals included, when it
// enters the top N; its histograms count from then).
struct PerModelSeries {
  enum class Mode { kAll, kNone, kTop };
  Mode mode = Mode::kAll;
  int top = 0;  // kTop: N >= 1
  static constexpr double kTopRankSeconds = 60;
  // "all", "none" or "top-N" (1 <= N <= 1,000,000); InvalidArgument otherwise.
  static absl::StatusOr<PerModelSeries> Parse(const std::string& text);
  std::string ToString() const;
};

}  // namespace cmestream::service
