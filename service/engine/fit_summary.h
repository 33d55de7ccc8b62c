// The estimators' own fit summaries and reports (core/*) as the wire's messages: what a sub-view reply
// carries so a user sees how the fit ended (termination, sizes, iterations, timings) without
// reading the daemon's log. Pure conversions; the figure names are documented in
// docs/user-guide.md ("Reading a fit summary") and are part of the API.
#pragma once

#include "cmestream/v1/cmestream.pb.h"
#include "core/aggregation/soft_aggregation.h"
#include "core/cluster/metastable.h"
#include "core/embedding/state_embedding.h"
#include "core/latent/latent_model.h"
#include "service/engine/model_view.h"

namespace cmestream::service {

v1::FitSummary ToFitSummary(const StateEmbedding::Summary& s);
v1::FitSummary ToFitSummary(const WeightedKMeansResult& kmeans);
// Also the gap sigma_r / sigma_{r+1} of the count matrix ("singular_value_gap"): large means
// r meta-states are supported by the data.
v1::FitSummary ToFitSummary(const AggregationResult& result);
v1::FitSummary ToFitSummary(const LatentModel::Summary& s);
v1::FitSummary ToFitSummary(const CountsSnapshot& counts);
v1::FitSummary ToFitSummary(const PredictiveStateModel& model);
v1::FitSummary ToFitSummary(const LagsView& lags);
v1::FitSummary ToFitSummary(const ForecastView& forecast);

// The Koopman view's report and headline as the wire's messages (GetKoopman, describe).
v1::SpectrumInfo ToSpectrumInfo(const SpectrumReport& report, const HeldoutScore& heldout);
v1::KoopmanHeadline ToHeadline(const KoopmanHeadline& headline);

// Appends one SubViewStatus per sub-view of `view` (model describe: what is available, why
// not, and how each fit ended).
void AddSubViewStatuses(const ModelView& view, google::protobuf::RepeatedPtrField<v1::SubViewStatus>* out);

}  // namespace cmestream::service
