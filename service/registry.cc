#include "service/registry.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "service/memory_budget.h"

namespace cmestream::service {

void ModelRegistry::SetLimits(const LimitOptions& limits) {
  limits_ = limits;
  memory_budget_ = limits.max_memory_bytes > 0 ? limits.max_memory_bytes : DefaultMemoryBudget();
}

double ModelRegistry::committed_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  double total = 0;
  for (const auto& [name, model] : models_) total += EstimateModelBytes(model->config());
  return total;
}

absl::Status ModelRegistry::CheckBudgetLocked(const v1::ModelConfig& config) const {
  if (memory_budget_ <= 0) return absl::OkStatus();
  double committed = 0;
  for (const auto& [name, model] : models_) committed += EstimateModelBytes(model->config());
  const double need = EstimateModelBytes(config);
  if (committed + need <= memory_budget_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot hold model '", config.name(), "': at its configured limits it may need about ", FormatBytes(need),
      " (max_dict ", config.max_dict(), ", rff_features ", config.rff_features(), "), but the ", models_.size(),
      " models held may already use ", FormatBytes(committed), " of this daemon's memory budget of ",
      FormatBytes(memory_budget_), " (--max-memory); delete a model, or lower max_dict / rff_features"));
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Create(const v1::ModelConfig& config,
                                                             std::optional<uint64_t> replay_sequence) {
  // Replay re-creates what was accepted then, whatever today's limits say.
  if (!replay_sequence) {
    if (absl::Status s = CheckModelConfigLimits(config, limits_); !s.ok()) return s;  // names --max-dim
  }
  absl::StatusOr<v1::ModelConfig> normalized =
      replay_sequence ? absl::StatusOr<v1::ModelConfig>(config) : NormalizeModelConfig(config, defaults_);
  if (!normalized.ok()) return normalized.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (models_.count(normalized->name())) {
    return absl::AlreadyExistsError(absl::StrCat("model '", normalized->name(), "' already exists"));
  }
  if (!replay_sequence && models_.size() >= static_cast<size_t>(limits_.max_models)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot create model '", normalized->name(), "': this daemon holds ",
                                                     models_.size(), " models, its limit (--max-models ",
                                                     limits_.max_models, "); delete a model first"));
  }
  if (!replay_sequence) {
    if (absl::Status s = CheckBudgetLocked(*normalized); !s.ok()) return s;
  }
  // Built before it is logged, so a failed allocation leaves no record behind (a logged model
  // that cannot be built would fail every later start under the same limits). Allocation
  // happens under the map lock; creation is rare.
  std::shared_ptr<ModelMetrics> metrics = metrics_.ForModel(normalized->name());
  std::shared_ptr<Model> model;
  try {
    model = std::make_shared<Model>(*normalized, metrics, &log_);
  } catch (const std::bad_alloc&) {
    metrics->Remove();
    return absl::ResourceExhaustedError(absl::StrCat("cannot create model '", normalized->name(),
                                                     "': out of memory while allocating it; nothing was created"));
  }
  // Durable before the model exists: a batch can only be logged for a model found in the map.
  uint64_t sequence = replay_sequence.value_or(0);
  if (!replay_sequence) {
    absl::StatusOr<uint64_t> logged = log_.AppendModelCreated(*normalized);
    if (!logged.ok()) {
      metrics->Remove();
      return logged.status();
    }
    sequence = *logged;
  }
  model->set_applied_sequence(sequence);
  models_.emplace(model->name(), model);
  metrics_.SetModelCount(models_.size());
  return model;
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name.substr(0, 80), "' does not exist"));
  }
  return it->second;
}

absl::Status ModelRegistry::Delete(const std::string& name, bool replay) {
  std::shared_ptr<Model> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return absl::NotFoundError(absl::StrCat("model '", name.substr(0, 80), "' does not exist"));
    absl::Status marked = it->second->MarkDeleted([&]() -> absl::Status {
      if (replay) return absl::OkStatus();
      return log_.AppendModelDeleted(name).status();
    });
    if (!marked.ok()) return marked;
    removed = std::move(it->second);
    models_.erase(it);
    metrics_.SetModelCount(models_.size());
  }
  removed->metrics().Remove();
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Model>> ModelRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Model>> out;
  out.reserve(models_.size());
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

std::vector<std::shared_ptr<Model>> ModelRegistry::ListAtCut(uint64_t* last_sequence) const {
  std::lock_guard<std::mutex> lock(mu_);
  *last_sequence = log_.last_sequence();
  std::vector<std::shared_ptr<Model>> out;
  out.reserve(models_.size());
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Adopt(const std::string& name, const ModelBuilder& build,
                                                            const std::string* import_image) {
  const bool check_budget = import_image != nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (models_.count(name)) return absl::AlreadyExistsError(absl::StrCat("model '", name, "' already exists"));
  if (check_budget && models_.size() >= static_cast<size_t>(limits_.max_models)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot import model '", name, "': this daemon holds ",
                                                     models_.size(), " models, its limit (--max-models ",
                                                     limits_.max_models, "); delete a model first"));
  }
  std::shared_ptr<ModelMetrics> metrics = metrics_.ForModel(name);
  absl::StatusOr<std::shared_ptr<Model>> model;
  try {
    model = build(metrics, &log_);
  } catch (const std::bad_alloc&) {
    model = absl::ResourceExhaustedError(
        absl::StrCat("cannot load model '", name, "': out of memory while allocating it; nothing was registered"));
  }
  if (model.ok() && check_budget) {
    if (absl::Status s = CheckBudgetLocked((*model)->config()); !s.ok()) model = s;
  }
  if (model.ok() && import_image != nullptr) {
    absl::StatusOr<uint64_t> logged = log_.AppendModelImported(name, *import_image);
    if (logged.ok()) {
      (*model)->set_applied_sequence(*logged);
    } else {
      model = logged.status();
    }
  }
  if (!model.ok()) {
    metrics->Remove();
    return model.status();
  }
  models_.emplace(name, *model);
  metrics_.SetModelCount(models_.size());
  return model;
}

}  // namespace cmestream::service
