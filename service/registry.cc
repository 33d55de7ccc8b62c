#include "service/registry.h"

#include "absl/strings/str_cat.h"

namespace cmestream::service {

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
  // Durable before the model exists: a batch can only be logged for a model found in the map.
  uint64_t sequence = replay_sequence.value_or(0);
  if (!replay_sequence) {
    absl::StatusOr<uint64_t> logged = log_.AppendModelCreated(*normalized);
    if (!logged.ok()) return logged.status();
    sequence = *logged;
  }
  // Allocation of the learner (O(max_dict^2)) happens under the map lock; creation is rare.
  auto model = std::make_shared<Model>(*normalized, metrics_.ForModel(normalized->name()), &log_);
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

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Adopt(const std::string& name, const ModelBuilder& build) {
  std::lock_guard<std::mutex> lock(mu_);
  if (models_.count(name)) return absl::AlreadyExistsError(absl::StrCat("model '", name, "' already exists"));
  std::shared_ptr<ModelMetrics> metrics = metrics_.ForModel(name);
  absl::StatusOr<std::shared_ptr<Model>> model = build(metrics, &log_);
  if (!model.ok()) {
    metrics->Remove();
    return model.status();
  }
  models_.emplace(name, *model);
  metrics_.SetModelCount(models_.size());
  return model;
}

}  // namespace cmestream::service
