#include "service/model_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace cmestream::service {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status Bad(const v1::ModelConfig& c, absl::string_view field, double value,
                 absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("model '", c.name(), "': field ", field, " is ",
                                                 value, ", expected ", expected));
}

}  // namespace

absl::StatusOr<v1::ModelConfig> NormalizeModelConfig(const v1::ModelConfig& in,
                                                     const ConfigDefaults& defaults) {
  if (!ValidName(in.name())) {
    return absl::InvalidArgumentError(
        absl::StrCat("field name is '", in.name().substr(0, 80), "', expected 1 to 64 characters from [A-Za-z0-9_.-]"));
  }
  v1::ModelConfig c = in;
  if (c.num_states() > 0) {
    return absl::UnimplementedError(absl::StrCat("model '", c.name(), "': field num_states is ", c.num_states(),
                                                 ", but discrete models are not served yet; expected 0"));
  }
  if (c.dim() < 1 || c.dim() > kMaxDim) return Bad(c, "dim", c.dim(), absl::StrCat("1..", kMaxDim));

  if (!c.has_sigma()) c.set_sigma(0);  // auto
  if (!std::isfinite(c.sigma()) || c.sigma() < 0) return Bad(c, "sigma", c.sigma(), "> 0, or 0/unset for auto");
  if (!c.has_eta()) c.set_eta(0.1);
  if (!std::isfinite(c.eta()) || c.eta() <= 0) return Bad(c, "eta", c.eta(), "> 0");
  if (!c.has_lambda()) c.set_lambda(1e-3);
  if (!std::isfinite(c.lambda()) || c.lambda() < 0) return Bad(c, "lambda", c.lambda(), ">= 0");
  if (c.eta() * c.lambda() >= 1) return Bad(c, "eta*lambda", c.eta() * c.lambda(), "< 1");
  if (!c.has_epsilon()) c.set_epsilon(1e-3);
  if (!std::isfinite(c.epsilon()) || c.epsilon() < 0) return Bad(c, "epsilon", c.epsilon(), ">= 0");
  if (!c.has_max_dict()) c.set_max_dict(1000);
  if (c.max_dict() < 1 || c.max_dict() > kMaxDictCap) return Bad(c, "max_dict", c.max_dict(), absl::StrCat("1..", kMaxDictCap));
  if (!c.has_dt()) c.set_dt(1.0);
  if (!std::isfinite(c.dt()) || c.dt() <= 0) return Bad(c, "dt", c.dt(), "> 0");
  if (!c.has_seed()) c.set_seed(1);
  if (!c.has_auto_sigma_warmup()) c.set_auto_sigma_warmup(1000);
  if (c.auto_sigma_warmup() < kMinAutoSigmaWarmup || c.auto_sigma_warmup() > kMaxAutoSigmaWarmup) {
    return Bad(c, "auto_sigma_warmup", c.auto_sigma_warmup(),
               absl::StrCat(kMinAutoSigmaWarmup, "..", kMaxAutoSigmaWarmup));
  }
  if (!c.has_refresh_interval_seconds()) c.set_refresh_interval_seconds(defaults.refresh_interval_seconds);
  if (!std::isfinite(c.refresh_interval_seconds()) || c.refresh_interval_seconds() <= 0) {
    return Bad(c, "refresh_interval_seconds", c.refresh_interval_seconds(), "> 0");
  }
  if (!c.has_refresh_every_samples()) c.set_refresh_every_samples(0);
  if (!c.has_step_decay_samples()) c.set_step_decay_samples(0);
  if (!std::isfinite(c.step_decay_samples()) || c.step_decay_samples() < 0) {
    return Bad(c, "step_decay_samples", c.step_decay_samples(), ">= 0 (0 = constant step)");
  }
  if (!c.has_step_decay_power()) c.set_step_decay_power(0.5);
  if (!std::isfinite(c.step_decay_power()) || c.step_decay_power() <= 0 || c.step_decay_power() > 1) {
    return Bad(c, "step_decay_power", c.step_decay_power(), "in (0, 1]");
  }
  if (!c.has_averaging()) c.set_averaging(false);

  // Last line of defense: whatever the core learner itself requires.
  const absl::Status core = CmeOptionsFor(c, c.sigma() > 0 ? c.sigma() : 1.0).Validate();
  if (!core.ok()) return absl::InvalidArgumentError(absl::StrCat("model '", c.name(), "': ", core.message()));
  return c;
}

CompressedCme::Options CmeOptionsFor(const v1::ModelConfig& c, double sigma) {
  CompressedCme::Options o;
  o.dim = static_cast<int>(c.dim());
  o.sigma = sigma;
  o.eta = c.eta();
  o.lambda = c.lambda();
  o.epsilon = c.epsilon();
  o.max_dict = static_cast<int>(c.max_dict());
  o.step_decay_samples = c.step_decay_samples();
  o.step_decay_power = c.step_decay_power();
  o.averaging = c.averaging();
  return o;
}

}  // namespace cmestream::service
