#include "service/engine/refresh.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/engine/fit_summary.h"
#include "service/engine/model_config.h"

namespace cmestream::service {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool Covers(const std::shared_ptr<const ModelView>& view, uint64_t target) {
  return view != nullptr && view->progress >= target;
}

// Each sub-view's health as metrics (view_available, view_fit_warning): the same statuses and
// fit summaries `model describe` shows (ModelInfo.sub_views).
void ReportSubViews(const ModelView& view, ModelMetrics& metrics) {
  google::protobuf::RepeatedPtrField<v1::SubViewStatus> statuses;
  AddSubViewStatuses(view, &statuses);
  for (const v1::SubViewStatus& s : statuses) {
    const std::string& termination = s.summary().termination();
    metrics.OnSubView(s.name(), s.available(), !termination.empty() && termination != "success");
  }
}

// Pairs a prequential window must hold before its score is reported.
constexpr int64_t kMinPrequentialPairs = 1000;

// The new view's held-out score (prequential, test-then-train): the window's once it holds kMinPrequentialPairs pairs,
// else the previous view's (NaN before any complete window). Returns whether the new view's scorer should replace the
// current one: after a complete window, or when there is none yet.
bool ReportPrequential(const std::optional<Model::LearnerSnapshot::Prequential>& window,
                       const std::shared_ptr<const ModelView>& previous, HeldoutScore& heldout) {
  if (window && window->pairs >= kMinPrequentialPairs) {
    heldout.score = window->score;
    heldout.pairs = static_cast<uint64_t>(window->pairs);
    heldout.view_version = window->view_version;
    return true;
  }
  if (previous && previous->cme) heldout = previous->heldout;
  return !window.has_value();
}

}  // namespace

std::shared_ptr<const ModelView> RefreshModel(Model& model) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<Model::LearnerSnapshot> snap = model.Snapshot();  // the only step under the lock
  if (!snap) return nullptr;
  const double snapshot_seconds = Seconds(std::chrono::steady_clock::now() - start);

  // Every estimator is fitted in core; each sub-view succeeds or fails on its own.
  const v1::ModelConfig& config = model.config();
  absl::StatusOr<LearnerView> fitted = FitViews(*snap, ViewOptionsFor(config));
  if (!fitted.ok()) {  // the config was validated at creation: a bug, not the user's input
    std::cerr << "cmestreamd: model '" << config.name() << "': cannot fit views: " << fitted.status().message() << "\n";
    return nullptr;
  }
  auto view = std::make_shared<ModelView>();
  static_cast<LearnerView&>(*view) = *std::move(fitted);
  for (const auto& [name, seconds] : view->view_seconds) model.metrics().OnViewBuilt(name, seconds);
  view->view_seconds.insert(view->view_seconds.begin(), {"snapshot", snapshot_seconds});
  if (view->lags.value) {
    const LagsView& lags = *view->lags.value;
    const std::optional<LagTimescales>& primary = lags.koopman ? lags.koopman : lags.counts;
    const std::optional<CkTest>& ck = lags.ck_koopman ? lags.ck_koopman : lags.ck_counts;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (primary) {
      model.metrics().OnLags(primary->lags, primary->timescales, primary->stderrs, ck ? ck->max_deviation : nan,
                             ck ? ck->max_deviation_stderr : nan);
    }
  }
  const std::shared_ptr<const ModelView> previous = model.view();
  bool install_scorer = false;
  if (view->cme) {
    install_scorer = ReportPrequential(snap->prequential, previous, view->heldout) && view->scorer != nullptr;
    const SpectrumReport& spectrum = view->cme->spectrum;
    model.metrics().OnSpectrum(view->heldout.score, spectrum.comparison.relative_disagreement,
                               static_cast<double>(spectrum.epochs), spectrum.data_share);
    const TimescaleComparison& c = spectrum.comparison;
    model.metrics().OnSlowestTimescales(
        {c.koopman, c.count_chain, c.embedding, view->cme->headline.timescale, view->cme->headline.stderr_});
  }

  view->version = previous ? previous->version + 1 : 1;
  view->samples = snap->samples;
  view->progress = snap->progress;
  view->built_at = std::chrono::steady_clock::now();
  view->build_seconds = Seconds(view->built_at - start);
  ReportSubViews(*view, model.metrics());
  model.Publish(view);
  // The new view scores the pairs from now on (allocated here, outside the learner lock).
  if (install_scorer) model.InstallPrequential(std::make_unique<PrequentialVampE>(view->scorer), view->version);
  model.metrics().OnRefresh(view->build_seconds, snap->inverse_drift, view->version, view->samples);
  return view;
}

RefreshScheduler::RefreshScheduler(ModelRegistry& registry, Options options)
    : registry_(registry),
      options_(options),
      thread_(
          absl::Seconds(options.tick_seconds),
          [this] {
            RefreshDueModels();
            SweepIdleModels();
            CompleteWaiters();
          },
          "cme-refresh") {}

void RefreshScheduler::Start() { thread_.Start(); }

void RefreshScheduler::Stop() {
  std::vector<Waiter> orphans;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
  }
  thread_.Stop();
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    orphans.swap(waiters_);
  }
  for (Waiter& w : orphans) w.done(absl::UnavailableError("cmestreamd is shutting down"));
}

void RefreshScheduler::Request(Model& model) {
  model.refresh_requested = true;
  thread_.Wake();
}

void RefreshScheduler::Wait(std::shared_ptr<Model> model, uint64_t target, Clock::time_point deadline, Callback done) {
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
    if (!stopping) {
      // Checked under mu_: CompleteWaiters runs after every publish, so a view published
      // between this check and the push is still seen by the next pass.
      std::shared_ptr<const ModelView> view = model->view();
      if (!Covers(view, target)) {
        model->refresh_requested = true;
        waiters_.push_back({std::move(model), target, deadline, std::move(done)});
        thread_.Wake();
        return;
      }
    }
  }
  if (stopping) {
    done(absl::UnavailableError("cmestreamd is shutting down"));
  } else {
    done(model->view());
  }
}

void RefreshScheduler::SweepIdleModels() {
  if (options_.evict_idle_seconds <= 0) return;
  const Clock::time_point now = Clock::now();
  if (Seconds(now - last_sweep_) < kSweepSeconds) return;
  last_sweep_ = now;
  // The freed learners are many mid-sized blocks (the RFF moments, the forecast sums) that
  // glibc keeps in its arenas: give their pages back, so that eviction lowers the resident
  // memory and not only the budget's count (docs/benchmarks.md "Fleets": eviction).
  if (registry_.EvictIdle(options_.evict_idle_seconds, kSweepBudgetSeconds) > 0) ::malloc_trim(0);
}

void RefreshScheduler::RefreshDueModels() {
  for (const std::shared_ptr<Model>& model : registry_.List()) {
    const Clock::time_point now = Clock::now();
    const Model::Stats stats = model->stats();
    std::shared_ptr<const ModelView> view = model->view();
    const uint64_t view_progress = view ? view->progress : 0;
    const bool has_new = stats.learner_ready && stats.samples > 0 && (!view || stats.progress > view_progress);
    const v1::ModelConfig& config = model->config();
    // The interval is a floor: a periodic refresh also waits kPeriodicIdlePerBuild times the
    // last view's build time, so periodic refreshes take at most a tenth of a core per model and
    // leave the ingest its cores (a 512-channel model at the dictionary cap builds in ~1.7 s).
    const double gap =
        std::max(config.refresh_interval_seconds(), kPeriodicIdlePerBuild * (view ? view->build_seconds : 0.0));
    const bool interval_elapsed = Seconds(now - model->last_refresh_attempt) >= gap;
    const bool enough_samples =
        config.refresh_every_samples() > 0 && stats.progress - view_progress >= config.refresh_every_samples();
    const bool requested = model->refresh_requested.exchange(false);
    if (has_new && requested && !view && model->evicted()) {
      // Restored evicted at start, with no view (Model's RESTART): asked for one by a view
      // query or Refresh, so it is loaded back first (and evicted again once idle).
      if (absl::Status s = model->EnsureResident(); !s.ok()) {
        std::cerr << "cmestreamd: model '" << config.name()
                  << "': cannot load it back to build its view: " << s.message() << "\n";
      }
    }
    if (has_new && (requested || interval_elapsed || enough_samples)) {
      model->last_refresh_attempt = now;
      view = RefreshModel(*model);
    }
    if (view) {
      model->metrics().SetViewAge(Seconds(Clock::now() - view->built_at));
    } else {
      model->metrics().SetNoView();  // age since creation: a view that never comes is stale
    }
  }
}

void RefreshScheduler::CompleteWaiters() {
  std::vector<std::pair<Callback, absl::StatusOr<std::shared_ptr<const ModelView>>>> ready;
  {
    absl::MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    auto keep = waiters_.begin();
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      std::shared_ptr<const ModelView> view = it->model->view();
      absl::StatusOr<std::shared_ptr<Model>> current = registry_.Get(it->model->name());
      if (!current.ok() || *current != it->model) {
        ready.emplace_back(std::move(it->done),
                           absl::NotFoundError(absl::StrCat("model '", it->model->name(), "' was deleted")));
      } else if (Covers(view, it->target)) {
        ready.emplace_back(std::move(it->done), std::move(view));
      } else if (now >= it->deadline) {
        ready.emplace_back(std::move(it->done), absl::DeadlineExceededError(absl::StrCat(
                                                    "model '", it->model->name(), "': no view reflecting ", it->target,
                                                    " samples was built before the timeout (latest view reflects ",
                                                    view ? view->progress : 0, ")")));
      } else {
        it->model->refresh_requested = true;  // keep asking until covered
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    waiters_.erase(keep, waiters_.end());
  }
  for (auto& [done, result] : ready) done(std::move(result));
}

}  // namespace cmestream::service
