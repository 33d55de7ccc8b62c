#include "service/engine/registry.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <new>

#include "absl/strings/str_cat.h"
#include "service/engine/memory_budget.h"

namespace cmestream::service {

void ModelRegistry::SetLimits(const LimitOptions& limits) {
  limits_ = limits;
  ledger_.set_budget(limits.max_memory_bytes > 0 ? limits.max_memory_bytes : DefaultMemoryBudget());
  metrics_.SetMemory(ledger_.budget(), ledger_.committed());
}

double ModelRegistry::committed_bytes() const { return ledger_.committed(); }

absl::Status ModelRegistry::AdmitLocked(const v1::ModelConfig& config, double bytes, const char* verb) {
  if (ledger_.TryAdmit(bytes)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot ", verb, " model '", config.name(), "': even empty it needs about ", FormatBytes(bytes),
      " (rff_features ", config.rff_features(), ", max_dict ", config.max_dict(), "), but the ", models_.size(),
      " models held use ", FormatBytes(ledger_.committed()), " of this daemon's memory budget of ",
      FormatBytes(ledger_.budget()), " (--max-memory); delete a model, or lower rff_features"));
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Create(const v1::ModelConfig& config,
                                                             std::optional<uint64_t> replay_sequence) {
  // Replay re-creates what was accepted then, whatever today's limits say.
  if (!replay_sequence) {
    if (absl::Status s = CheckModelConfigLimits(config, limits_); !s.ok()) return s;  // names --max-dim
    if (config.has_fork_of() || config.has_fork_index()) {
      return absl::InvalidArgumentError(absl::StrCat("model '", config.name().substr(0, 80),
                                                     "': fields fork_of and fork_index are set by the daemon when an "
                                                     "alarm starts a fork (on_change 'fork'), expected unset"));
    }
  }
  absl::StatusOr<v1::ModelConfig> normalized =
      replay_sequence ? absl::StatusOr<v1::ModelConfig>(config) : NormalizeModelConfig(config, defaults_);
  if (!normalized.ok()) return normalized.status();
  const std::string& name = normalized->name();
  const double charge = std::ceil(EstimateEmptyModelBytes(*normalized));
  {
    absl::MutexLock lock(&mu_);
    if (TakenLocked(name)) return absl::AlreadyExistsError(absl::StrCat("model '", name, "' already exists"));
    if (!replay_sequence && HeldLocked() >= static_cast<size_t>(limits_.max_models)) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot create model '", name, "': this daemon holds ",
                                                       HeldLocked(), " models, its limit (--max-models ",
                                                       limits_.max_models, "); delete a model first"));
    }
    // Charged by what an empty model holds; its dictionary's growth is charged as it happens
    // (Model::GrantDictionaryCap). Replay re-creates what was accepted then.
    if (!replay_sequence) {
      if (absl::Status s = AdmitLocked(*normalized, charge, "create"); !s.ok()) return s;
    } else {
      ledger_.Admit(charge);
    }
    reserved_.emplace(name, *normalized);
  }
  // Built before it is logged, so a failed allocation leaves no record behind (a logged model
  // that cannot be built would fail every later start under the same limits). Neither the
  // allocation nor the durable log append holds the registry lock.
  std::shared_ptr<ModelMetrics> metrics = metrics_.ForModel(name);
  absl::StatusOr<std::shared_ptr<Model>> model;
  try {
    model = std::make_shared<Model>(*normalized, metrics, &log_);
  } catch (const std::bad_alloc&) {
    model = absl::ResourceExhaustedError(
        absl::StrCat("cannot create model '", name, "': out of memory while allocating it; nothing was created"));
  }
  // Durable before the model exists: a batch can only be logged for a model found in the map.
  if (model.ok()) {
    uint64_t sequence = replay_sequence.value_or(0);
    if (!replay_sequence) {
      absl::StatusOr<uint64_t> logged = log_.AppendModelCreated(*normalized);
      if (logged.ok()) {
        sequence = *logged;
      } else {
        model = logged.status();
      }
    }
    if (model.ok()) (*model)->set_applied_sequence(sequence);
  }
  return Publish(name, metrics, std::move(model), charge);
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Publish(const std::string& name,
                                                              const std::shared_ptr<ModelMetrics>& metrics,
                                                              absl::StatusOr<std::shared_ptr<Model>> model,
                                                              double charged) {
  // The end of a Create or Adopt: the reserved name becomes the model, or is freed (with its
  // metric series, before the name can be taken again) when the slow part failed.
  absl::MutexLock lock(&mu_);
  reserved_.erase(name);
  EndChangeLocked();
  if (!model.ok()) {
    if (charged > 0) ledger_.Remove(charged);
    metrics->Remove();
    return model.status();
  }
  (*model)->AttachLedger(&ledger_, charged);
  (*model)->SetSideExecutor(side_executor_);
  (*model)->SetSpill(spill_);
  if (ForksOnChange((*model)->config())) (*model)->SetForkSink(this);
  models_.emplace(name, *model);
  metrics_.SetModelCount(models_.size());
  metrics_.SetMemory(ledger_.budget(), ledger_.committed());
  return model;
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Get(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name.substr(0, 80), "' does not exist"));
  }
  return it->second;
}

absl::Status ModelRegistry::Delete(const std::string& name, bool replay) {
  std::shared_ptr<Model> model;
  {
    absl::MutexLock lock(&mu_);
    while (deleting_.count(name) > 0) changed_.Wait(&mu_);  // one deletion of a name at a time
    auto it = models_.find(name);
    if (it == models_.end())
      return absl::NotFoundError(absl::StrCat("model '", name.substr(0, 80), "' does not exist"));
    model = it->second;
    deleting_.insert(name);
  }
  // Waits for a batch of this model being written (its log lock) and for the deletion
  // record's fdatasync: without the registry lock.
  absl::Status marked = model->MarkDeleted([&]() -> absl::Status {
    if (replay) return absl::OkStatus();
    return log_.AppendModelDeleted(name).status();
  });
  absl::MutexLock lock(&mu_);
  deleting_.erase(name);
  EndChangeLocked();
  if (!marked.ok()) return marked;
  // Still this model: while it was being deleted, Create and Adopt refused the name (it stayed
  // in the map) and another Delete waited. The series go before the name is free again, so a
  // model created under the same name next gets fresh series (prometheus returns the existing
  // series for known labels, and a later Remove would delete them under the new model).
  model->ForgetEviction();  // before its series go (an evicted model's file goes with the object)
  model->metrics().Remove();
  model->DetachLedger();
  models_.erase(name);
  metrics_.SetModelCount(models_.size());
  metrics_.SetMemory(ledger_.budget(), ledger_.committed());
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Model>> ModelRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Model>> out;
  out.reserve(models_.size());
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

std::vector<std::shared_ptr<Model>> ModelRegistry::ListAtCut(uint64_t* last_sequence) const {
  absl::MutexLock lock(&mu_);
  // A change in progress may have its record in the log but not yet in the map (or the
  // reverse): wait for all of them, so the cut and the map agree.
  while (!reserved_.empty() || !deleting_.empty()) changed_.Wait(&mu_);
  *last_sequence = log_.last_sequence();
  std::vector<std::shared_ptr<Model>> out;
  out.reserve(models_.size());
  for (const auto& [name, model] : models_) out.push_back(model);
  return out;
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistry::Adopt(const std::string& name, const ModelBuilder& build,
                                                            const std::string* import_image) {
  const bool check_budget = import_image != nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (TakenLocked(name)) return absl::AlreadyExistsError(absl::StrCat("model '", name, "' already exists"));
    if (check_budget && HeldLocked() >= static_cast<size_t>(limits_.max_models)) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot import model '", name, "': this daemon holds ",
                                                       HeldLocked(), " models, its limit (--max-models ",
                                                       limits_.max_models, "); delete a model first"));
    }
    reserved_.emplace(name, std::nullopt);  // its size is known once built
  }
  std::shared_ptr<ModelMetrics> metrics = metrics_.ForModel(name);
  absl::StatusOr<std::shared_ptr<Model>> model;
  try {
    model = build(metrics, &log_);
  } catch (const std::bad_alloc&) {
    model = absl::ResourceExhaustedError(
        absl::StrCat("cannot load model '", name, "': out of memory while allocating it; nothing was registered"));
  }
  double charge = 0;
  if (model.ok()) {
    // Charged by what it holds (its dictionary's capacity); a live import must fit the
    // budget, a restore or replay is counted whatever it says (accepted then). A model
    // restored evicted (Model's RESTART) is counted when loaded back.
    charge = std::ceil((*model)->HeldBytesEstimate());
    absl::MutexLock lock(&mu_);
    if ((*model)->evicted()) {
      charge = 0;
    } else if (!check_budget) {
      ledger_.Admit(charge);
    } else if (absl::Status s = AdmitLocked((*model)->config(), charge, "import"); !s.ok()) {
      model = s;
      charge = 0;
    }
    if (model.ok()) reserved_[name] = (*model)->config();
  }
  if (model.ok() && import_image != nullptr) {
    absl::StatusOr<uint64_t> logged = log_.AppendModelImported(name, *import_image);
    if (logged.ok()) {
      (*model)->set_applied_sequence(*logged);
    } else {
      model = logged.status();
    }
  }
  return Publish(name, metrics, std::move(model), charge);
}

void ModelRegistry::Forward(const Model& parent, const ForkPlan& plan, const StreamBatch& applied, uint64_t sequence) {
  std::shared_ptr<Model> fork = plan.current > 0 ? FindFork(parent, plan.current, plan.current_index) : nullptr;
  int64_t begin = 0;
  for (size_t s = 0;; ++s) {
    const int64_t end = s < plan.starts.size() ? std::min(plan.starts[s].row, applied.n) : applied.n;
    if (fork != nullptr && end > begin) {
      StreamBatch part = PairsOf(applied, begin, end);
      part.gap = part.gap || s > 0;  // a new fork's first pairs start its episode
      fork->ApplyFork(part, sequence);
    }
    if (s == plan.starts.size()) break;
    fork = StartFork(parent, plan.current + static_cast<int64_t>(s) + 1, plan.starts[s].index);
    begin = end;
  }
}

std::shared_ptr<Model> ModelRegistry::FindFork(const Model& parent, int64_t k, int64_t index) const {
  absl::StatusOr<std::shared_ptr<Model>> m = Get(absl::StrCat(parent.name(), ".", k));
  if (!m.ok()) return nullptr;
  const v1::ModelConfig& c = (*m)->config();
  if (!IsFork(c) || c.fork_of() != parent.name() || c.fork_index() != static_cast<uint64_t>(index)) return nullptr;
  return *m;
}

std::shared_ptr<Model> ModelRegistry::StartFork(const Model& parent, int64_t k, int64_t index) {
  if (std::shared_ptr<Model> found = FindFork(parent, k, index)) return found;
  const v1::ModelConfig config = ForkConfig(parent.config(), k, index);
  const std::string& name = config.name();
  const double charge = std::ceil(EstimateEmptyModelBytes(config));
  absl::Status refused;
  ForkRefusal reason = ForkRefusal::kError;
  {
    absl::MutexLock lock(&mu_);
    if (TakenLocked(name)) {
      refused = absl::AlreadyExistsError(absl::StrCat("a model named '", name, "' that is not this fork exists"));
      reason = ForkRefusal::kNameTaken;
    } else if (HeldLocked() >= static_cast<size_t>(limits_.max_models)) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "this daemon holds ", HeldLocked(), " models, its limit (--max-models ", limits_.max_models, ")"));
      reason = ForkRefusal::kMaxModels;
    } else {
      refused = AdmitLocked(config, charge, "start fork");
      reason = ForkRefusal::kMemory;
    }
    if (refused.ok()) reserved_.emplace(name, config);
  }
  if (!refused.ok()) {
    std::cerr << "cmestreamd: model '" << parent.name() << "' raised its alarm " << k << " at pair " << index
              << "; its fork '" << name << "' was not started: " << refused.message() << "\n";
    metrics_.OnForkRefused(reason);
    return nullptr;
  }
  std::shared_ptr<ModelMetrics> metrics = metrics_.ForModel(name);
  absl::StatusOr<std::shared_ptr<Model>> model;
  try {
    model = std::make_shared<Model>(config, metrics, &log_);
  } catch (const std::bad_alloc&) {
    model = absl::ResourceExhaustedError("out of memory while allocating it");
  }
  absl::StatusOr<std::shared_ptr<Model>> published = Publish(name, metrics, std::move(model), charge);
  if (!published.ok()) {
    std::cerr << "cmestreamd: model '" << parent.name() << "' raised its alarm " << k << " at pair " << index
              << "; its fork '" << name << "' was not started: " << published.status().message() << "\n";
    metrics_.OnForkRefused(published.status().code() == absl::StatusCode::kResourceExhausted ? ForkRefusal::kMemory
                                                                                             : ForkRefusal::kError);
    return nullptr;
  }
  return *published;
}

}  // namespace cmestream::service

namespace cmestream::service {

int ModelRegistry::EvictIdle(double idle_seconds, double budget_seconds) {
  if (spill_ == nullptr || idle_seconds <= 0) return 0;
  const auto start = std::chrono::steady_clock::now();
  int evicted = 0;
  for (const std::shared_ptr<Model>& model : List()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget_seconds) break;
    if (model->evicted() || model->failed() || model->idle_seconds() < idle_seconds) continue;
    // Only a model whose view reflects every pair it learned (or that cannot have one yet):
    // an evicted model builds no view, so its queries answer what it knew. An idle model whose
    // view is behind (its refresh interval has not come, or the daemon restarted) gets its view
    // at the scheduler's next tick and is evicted by a later sweep.
    const Model::Stats stats = model->stats();
    const std::shared_ptr<const ModelView> view = model->view();
    const bool has_new = stats.learner_ready && stats.samples > 0 && (!view || stats.progress > view->progress);
    if (has_new) {
      model->refresh_requested = true;
      continue;
    }
    absl::StatusOr<bool> done = model->EvictIfIdle(idle_seconds);
    if (!done.ok()) {
      std::cerr << "cmestreamd: cannot evict idle model '" << model->name() << "': " << done.status().message()
                << " (it stays in memory; tried again after another idle period)\n";
      model->Touch();
      continue;
    }
    if (*done) ++evicted;
  }
  return evicted;
}

}  // namespace cmestream::service
