#include "service/engine/refresh.h"

#include <malloc.h>
#include <time.h>

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
      options_(std::move(options)),
      credit_(options_.refresh_budget * options_.burst_seconds),
      credited_at_(Now()),
      thread_(
          absl::Seconds(options_.tick_seconds), [this] { Tick(); }, "cme-refresh"),
      evict_thread_(
          absl::Seconds(kSweepSeconds), [this] { SweepIdleModels(); }, "cme-evict") {
  registry_.metrics().SetViewStaleness(options_.refresh_budget, 0, 0, 0);
}

void RefreshScheduler::Tick() {
  RefreshDueModels();
  CompleteWaiters();
}

void RefreshScheduler::Start() {
  thread_.Start();
  if (options_.evict_idle_seconds > 0) evict_thread_.Start();
}

void RefreshScheduler::Stop() {
  std::vector<Waiter> orphans;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
  }
  stop_pass_ = true;  // a pass of refreshes in progress ends after the view being built
  evict_thread_.Stop();
  thread_.Stop();
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    orphans.swap(waiters_);
    requests_.clear();
  }
  for (Waiter& w : orphans) w.done(absl::UnavailableError("cmestreamd is shutting down"));
}

void RefreshScheduler::Request(std::shared_ptr<Model> model) {
  model->refresh_requested = true;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    requests_.push_back(std::move(model));
  }
  request_pending_ = true;
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
        requests_.push_back(model);
        request_pending_ = true;
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
  // The freed learners are many mid-sized blocks (the RFF moments, the forecast sums) that
  // glibc keeps in its arenas: give their pages back, so that eviction lowers the resident
  // memory and not only the budget's count (docs/benchmarks.md "Fleets": eviction).
  evicted_since_trim_ += registry_.EvictIdle(options_.evict_idle_seconds, kSweepBudgetSeconds);
  const Clock::time_point now = Clock::now();
  if (evicted_since_trim_ > 0 && Seconds(now - last_trim_) >= kTrimSeconds) {
    ::malloc_trim(0);
    last_trim_ = now;
    evicted_since_trim_ = 0;
  }
}

namespace {

// CPU time of the calling thread: what a refresh costs the budget (other processes' load and
// the time this thread waits for a core are not charged).
double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The model has pairs its view does not reflect (and a learner to build one from).
bool HasNew(const Model::Stats& stats, const std::shared_ptr<const ModelView>& view) {
  return stats.learner_ready && stats.samples > 0 && (!view || stats.progress > view->progress);
}

}  // namespace

std::shared_ptr<const ModelView> RefreshScheduler::RefreshCharged(Model& model, bool requested) {
  model.last_refresh_attempt = Now();
  const double cpu_before = ThreadCpuSeconds();
  std::shared_ptr<const ModelView> view = RefreshModel(model);
  const double cpu = options_.charge_per_refresh_for_testing > 0 ? options_.charge_per_refresh_for_testing
                                                                 : ThreadCpuSeconds() - cpu_before;
  credit_ -= cpu;
  registry_.metrics().OnSchedulerRefresh(requested, cpu);
  return view;
}

void RefreshScheduler::Scan(Clock::time_point now) {
  // What the last scan left due and the budget deferred: the stale views (reported below).
  const size_t stale = due_.size() - next_due_;
  const double stale_age_max = stale > 0 ? Seconds(now - due_[next_due_].since) : 0;
  due_.clear();
  next_due_ = 0;
  const bool report = Seconds(now - reported_at_) >= kReportSeconds;
  const Clock::time_point real_now = Clock::now();  // views are stamped with the real clock
  double lag_pairs = 0;
  for (const std::shared_ptr<Model>& model : registry_.List()) {
    const Model::Stats stats = model->stats();
    const std::shared_ptr<const ModelView> view = model->view();
    if (report) {
      if (view) {
        model->metrics().SetViewAge(Seconds(real_now - view->built_at));
      } else {
        model->metrics().SetNoView();  // age since creation: a view that never comes is stale
      }
    }
    const uint64_t view_progress = view ? view->progress : 0;
    if (!HasNew(stats, view)) continue;
    lag_pairs += static_cast<double>(stats.progress - view_progress);
    if (model->refresh_requested.load()) {  // the eviction sweep's (Request and Wait queue theirs)
      absl::MutexLock lock(&mu_);
      requests_.push_back(model);
      continue;
    }
    const v1::ModelConfig& config = model->config();
    // The interval is a floor: a periodic refresh also waits kPeriodicIdlePerBuild times the
    // last view's build time, so one model's periodic refreshes take at most a tenth of a core
    // and leave the ingest its cores (a 512-channel model at the dictionary cap builds in ~1.7 s).
    const double gap =
        std::max(config.refresh_interval_seconds(), kPeriodicIdlePerBuild * (view ? view->build_seconds : 0.0));
    const bool interval_elapsed = Seconds(now - model->last_refresh_attempt) >= gap;
    const bool enough_samples =
        config.refresh_every_samples() > 0 && stats.progress - view_progress >= config.refresh_every_samples();
    if (interval_elapsed || enough_samples) due_.push_back({model, model->last_refresh_attempt});
  }
  // Oldest refresh first: a model the budget deferred is ahead of every model refreshed since.
  std::stable_sort(due_.begin(), due_.end(), [](const Due& a, const Due& b) { return a.since < b.since; });
  if (report) {
    reported_at_ = now;
    registry_.metrics().SetViewStaleness(options_.refresh_budget, stale, lag_pairs, stale_age_max);
    registry_.metrics().MaybeRankTopModels(real_now);  // --metrics-per-model top-N (every minute)
  }
}

void RefreshScheduler::RefreshDueModels() {
  const Clock::time_point now = Now();
  // The budget's credit: refresh_budget CPU seconds a second, at most burst_seconds' worth.
  const double budget = options_.refresh_budget;
  credit_ = std::min(credit_ + budget * std::max(0.0, Seconds(now - credited_at_)), budget * options_.burst_seconds);
  credited_at_ = now;
  request_pending_ = false;  // every request queued before this point is served below

  // The background triggers, every kScanSeconds (a scan reads every model's counters).
  if (Seconds(now - scanned_at_) >= kScanSeconds) {
    scanned_at_ = now;
    Scan(now);
  }
  // Explicit requests first, whatever the credit.
  std::vector<std::shared_ptr<Model>> requests;
  {
    absl::MutexLock lock(&mu_);
    requests.swap(requests_);
  }
  for (const std::shared_ptr<Model>& model : requests) {
    if (stop_pass_.load()) return;                            // shutting down: Stop answers the waiters
    if (!model->refresh_requested.exchange(false)) continue;  // served already (asked twice)
    if (!HasNew(model->stats(), model->view())) continue;
    if (!model->view() && model->evicted()) {
      // Restored evicted at start, with no view (Model's RESTART): asked for one by a view
      // query or Refresh, so it is loaded back first (and evicted again once idle).
      if (absl::Status s = model->EnsureResident(); !s.ok()) {
        std::cerr << "cmestreamd: model '" << model->config().name()
                  << "': cannot load it back to build its view: " << s.message() << "\n";
      }
    }
    RefreshCharged(*model, /*requested=*/true);
  }
  // Then the background ones, oldest refresh first, while the credit lasts and no request waits
  // (at least one a tick, so a stream of requests cannot stop them), until Stop.
  for (bool first = true;
       next_due_ < due_.size() && credit_ > 0 && !stop_pass_.load() && (first || !request_pending_.load());
       first = false) {
    Model& model = *due_[next_due_++].model;
    if (HasNew(model.stats(), model.view())) RefreshCharged(model, /*requested=*/false);
  }
}

void RefreshScheduler::CompleteWaiters() {
  std::vector<std::pair<Callback, absl::StatusOr<std::shared_ptr<const ModelView>>>> ready;
  {
    absl::MutexLock lock(&mu_);
    const Clock::time_point now = Now();
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
        requests_.push_back(it->model);
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    waiters_.erase(keep, waiters_.end());
  }
  for (auto& [done, result] : ready) done(std::move(result));
}

}  // namespace cmestream::service
