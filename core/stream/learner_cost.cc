#include "core/stream/learner_cost.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/alarms/alarm_monitor.h"
#include "core/stream/streaming_learner_options.h"

namespace cmestream {

std::vector<EstimatorCost> PerPairCost(const StreamingLearner::Options& o, int atoms, int spectral_basis) {
  std::vector<EstimatorCost> out;
  auto add = [&](std::string name, double madds, std::string formula) {
    out.push_back(EstimatorCost{std::move(name), madds, std::move(formula)});
  };
  if (o.discrete()) {
    // Counts, lags and alarms index tables: O(1) a pair.
    // The alarms' p-value walks the row of x: at most P entries.
    if (o.alarms) add("alarms", o.num_states, absl::StrCat("deg(x) <= P (P = ", o.num_states, ")"));
    add("counts", 1, "O(1)");
    if (!o.lags.empty())
      add("lags", static_cast<double>(o.lags.size()), absl::StrCat("O(L) (L = ", o.lags.size(), ")"));
    return out;
  }
  const double d = o.dim, e = o.estimator_dim(), c = o.input_dim();
  const double m = atoms > 0 ? atoms : o.cme.max_dict;
  const double n = o.rff_features;
  const std::string sizes = absl::StrCat(" (m = ", m, atoms > 0 ? "" : " (cap)", ", d = ", e, ")");
  if (o.scale_inputs || o.reduce > 0) {
    // Applied to x, y and (trajectories) the state: three rows a pair.
    const double per_row = (o.scale_inputs ? d : 0) + (o.reduce > 0 ? d * o.reduce : 0);
    add("input", 3 * per_row,
        absl::StrCat("3 (", o.scale_inputs ? "D" : "", o.scale_inputs && o.reduce > 0 ? " + " : "",
                     o.reduce > 0 ? "D K" : "", ") (D = ", d, o.reduce > 0 ? absl::StrCat(", K = ", o.reduce) : "",
                     ")"));
  }
  if (o.alarms && d > AlarmMonitor::kMaxSmallState) {
    // The linear forecast's moments of [1, x] against the C raw channels, and its prediction.
    add("alarms", (d + 1) * (d + 2) / 2 + 2 * (d + 1) * c,
        absl::StrCat("(D+1)(D+2)/2 + 2 (D+1) C (D = ", d, ", C = ", c, ")"));
  } else if (o.alarms) {
    // A small state (docs/algorithms.md §12.9): the forecast on [1, x, x^2, x^3] (P = 3 D) and
    // the coefficients' test, C D sign components.
    const double p = 3 * d;
    add("alarms", (p + 1) * (p + 2) / 2 + 2 * (p + 1) * c + c * d,
        absl::StrCat("(P+1)(P+2)/2 + 2 (P+1) C + C D (P = 3 D, D = ", d, ", C = ", c, ")"));
  }
  add("cme", 3 * m * m + 2 * m * e, "3 m^2 + 2 m d" + sizes);
  add("counts", m, "m (the nearest atoms from the kernel columns)" + sizes);
  add("embedding", 2 * n * n + n * e, absl::StrCat("2 N^2 + N d (N = ", n, ", d = ", e, ")"));
  if (spectral_basis > 0) {
    const double b = std::min<double>(spectral_basis, m);
    add("spectral", 2 * b * b + b * e, absl::StrCat("2 b^2 + b d (b = ", b, ", d = ", e, ")"));
  } else {
    add("spectral", 2 * m * m + m * e, "2 b^2 + b d, basis b <= m" + sizes);
  }
  if (!o.lags.empty()) {
    const double b = std::min<double>(o.lag_basis_atoms, m), l = static_cast<double>(o.lags.size());
    add("lags", l * (b * b + b * e), absl::StrCat("L (B^2 + B d) (L = ", l, ", B = ", b, ", d = ", e, ")"));
  }
  if (e <= learner_options::kMaxForecastDim) {
    const double f = learner_options::ForecastFeatureCount(o), q = 1 + e + f;
    add("forecast", q * (q + 1) / 2 + q * e + f * e,
        absl::StrCat("q (q+1)/2 + q d + F d (q = 1 + d + F, F = ", f, ", d = ", e, ")"));
    // The candidates' live skill (docs/algorithms.md §11 "Served forecast"): the linear part's
    // one-step forecast, and every S pairs H-step rollouts of the regression and the linear part.
    const double h = learner_options::ForecastSkillHorizon(o), s = std::ceil(h / 4);
    add("forecast_candidates", e * e + h / s * (f * e + q * e + e * e),
        absl::StrCat("d^2 + (H / S) (F d + q d + d^2) (H = ", h, ", S = ", s, ", F = ", f, ", d = ", e, ")"));
  }
  if (o.latent) add("latent", 3 * n * n + n * e, absl::StrCat("3 N^2 + N d (N = ", n, ", d = ", e, ")"));
  if (o.window > 0) {
    const double w = o.window * d;
    add("predictive", 2 * w * w, absl::StrCat("2 (k D)^2 (k = ", o.window, ", D = ", d, ")"));
  }
  return out;
}

}  // namespace cmestream
