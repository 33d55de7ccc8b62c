#include "service/refresh.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cmestream::service {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool Covers(const std::shared_ptr<const ModelView>& view, uint64_t target) {
  return view != nullptr && view->samples >= target;
}

}  // namespace

std::shared_ptr<const ModelView> RefreshModel(Model& model) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<Model::LearnerSnapshot> snap = model.Snapshot();  // the only step under the lock
  if (!snap) return nullptr;

  auto cme = std::make_shared<CmeView>();
  cme->snapshot = std::move(snap->cme);
  cme->inverse_drift = snap->inverse_drift;
  KoopmanOptions koopman;
  koopman.top = std::max(1, std::min<int>(kStoredEigenpairs, static_cast<int>(cme->snapshot.x_atoms.rows())));
  koopman.dt = model.config().dt();
  if (cme->snapshot.x_atoms.rows() > 0) cme->koopman = ComputeKoopman(cme->snapshot, koopman);

  auto view = std::make_shared<ModelView>();
  const std::shared_ptr<const ModelView> previous = model.view();
  view->version = previous ? previous->version + 1 : 1;
  view->samples = snap->samples;
  view->cme = std::move(cme);
  view->built_at = std::chrono::steady_clock::now();
  view->build_seconds = Seconds(view->built_at - start);
  model.Publish(view);
  model.metrics().OnRefresh(view->build_seconds, snap->inverse_drift, view->version, view->samples);
  return view;
}

RefreshScheduler::RefreshScheduler(ModelRegistry& registry, Options options)
    : registry_(registry), options_(options) {}

void RefreshScheduler::Start() { thread_ = std::thread([this] { Run(); }); }

void RefreshScheduler::Stop() {
  std::vector<Waiter> orphans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    orphans.swap(waiters_);
  }
  for (Waiter& w : orphans) w.done(absl::UnavailableError("cmestreamd is shutting down"));
}

void RefreshScheduler::Request(Model& model) {
  model.refresh_requested = true;
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  cv_.notify_all();
}

void RefreshScheduler::Wait(std::shared_ptr<Model> model, uint64_t target, Clock::time_point deadline,
                            Callback done) {
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stopping_;
    if (!stopping) {
      // Checked under mu_: CompleteWaiters runs after every publish, so a view published
      // between this check and the push is still seen by the next pass.
      std::shared_ptr<const ModelView> view = model->view();
      if (!Covers(view, target)) {
        model->refresh_requested = true;
        waiters_.push_back({std::move(model), target, deadline, std::move(done)});
        wake_ = true;
        cv_.notify_all();
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

void RefreshScheduler::Run() {
  const auto tick = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.tick_seconds));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, tick, [this] { return stopping_ || wake_; });
      if (stopping_) return;
      wake_ = false;
    }
    RefreshDueModels();
    CompleteWaiters();
  }
}

void RefreshScheduler::RefreshDueModels() {
  for (const std::shared_ptr<Model>& model : registry_.List()) {
    const Clock::time_point now = Clock::now();
    const Model::Stats stats = model->stats();
    std::shared_ptr<const ModelView> view = model->view();
    const uint64_t view_samples = view ? view->samples : 0;
    const bool has_new = stats.learner_ready && stats.samples > 0 && (!view || stats.samples > view_samples);
    const v1::ModelConfig& config = model->config();
    const bool interval_elapsed = Seconds(now - model->last_refresh_attempt) >= config.refresh_interval_seconds();
    const bool enough_samples =
        config.refresh_every_samples() > 0 && stats.samples - view_samples >= config.refresh_every_samples();
    const bool requested = model->refresh_requested.exchange(false);
    if (has_new && (requested || interval_elapsed || enough_samples)) {
      model->last_refresh_attempt = now;
      view = RefreshModel(*model);
    }
    if (view) model->metrics().SetViewAge(Seconds(Clock::now() - view->built_at));
  }
}

void RefreshScheduler::CompleteWaiters() {
  std::vector<std::pair<Callback, absl::StatusOr<std::shared_ptr<const ModelView>>>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
        ready.emplace_back(std::move(it->done),
                           absl::DeadlineExceededError(absl::StrCat(
                               "model '", it->model->name(), "': no view reflecting ", it->target,
                               " samples was built before the timeout (latest view reflects ",
                               view ? view->samples : 0, ")")));
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
