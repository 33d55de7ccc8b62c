// The forecast sub-view of a refresh: the regression of docs/algorithms.md §11 fitted from the
// learner snapshot's sums (all pairs so far, both folds).
#pragma once

#include "service/engine/model.h"
#include "service/engine/model_view.h"

namespace cmestream::service {

// Sets view.forecast.value, or view.forecast.error saying why there is none (a discrete model,
// a state too wide for the regression, too few pairs).
void BuildForecast(const Model::LearnerSnapshot& snap, ModelView& view);

}  // namespace cmestream::service
