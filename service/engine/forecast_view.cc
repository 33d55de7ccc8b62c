#include "service/engine/forecast_view.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cmestream::service {

void BuildForecast(const Model::LearnerSnapshot& snap, ModelView& view) {
  if (!snap.cme) {
    view.forecast.error = "the model is discrete; its forecasts come from the predictive-state filter (--window L)";
    return;
  }
  if (!snap.forecast) {
    view.forecast.error = "the model's state is too wide for the forecast regression (dim above 256)";
    return;
  }
  absl::StatusOr<ForecastModel> m = FitForecast(*snap.forecast);
  if (!m.ok()) {
    view.forecast.error = absl::StrCat(m.status().message(), " (", snap.forecast->samples, " pairs so far)");
    return;
  }
  auto v = std::make_shared<ForecastView>();
  v->model = *std::move(m);
  v->skill = snap.forecast->skill;
  v->samples = snap.forecast->samples;
  view.forecast.value = std::move(v);
}

}  // namespace cmestream::service
