// Background refresh: builds immutable, versioned views and swaps them in without blocking
// ingestion (CONTRIBUTING.md "Data flow").
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/engine/model.h"
#include "service/engine/periodic_thread.h"
#include "service/engine/registry.h"

namespace cmestream::service {

// Snapshot under the model's learner lock (with the drift check), then everything else off the
// lock: Koopman decomposition (top kStoredEigenpairs) and the new view, published with version
// previous + 1. Returns the new view, or nullptr while the model has no learner (warm-up).
// requires: called by one thread at a time per model (the scheduler), so versions increase.
std::shared_ptr<const ModelView> RefreshModel(Model& model);

// One thread that, every tick, refreshes the models whose view is due: a trigger fired and
// the model has new samples since its view. Triggers: refresh_interval_seconds elapsed since
// the last refresh, and at least kPeriodicIdlePerBuild times the last view's build time (a
// model's periodic views take at most a tenth of a core); refresh_every_samples new samples; or
// an explicit request (Refresh RPC, Wait).
//
// REFRESH BUDGET (--refresh-budget, Options::refresh_budget: a share of one core). The
// background refreshes (the interval and refresh_every_samples triggers) of all models together
// use at most that share of one core's CPU time, on average: a token bucket credited
// refresh_budget CPU seconds per second of wall time (at most burst_seconds' worth held), debited
// each refresh's CPU time on this thread (CLOCK_THREAD_CPUTIME_ID, so other processes' load is
// not charged). A background refresh starts only while the credit is positive; one that costs
// more than the credit leaves a debt that the next ones wait out. Due models are taken oldest
// refresh first (Model::last_refresh_attempt), so a model that waited is ahead of every model
// refreshed since: none is starved, and with n models due and credit for k refreshes a tick, each
// waits at most about n / k ticks. Explicit requests are served at once, whatever the credit
// (their CPU time is debited too, so they delay background refreshes, never each other); a
// request arriving during a pass of background refreshes ends that pass, so it waits for at most
// one refresh.
// STALE VIEWS. A model's view is stale when it is due (a trigger fired, new samples) and was not
// rebuilt by the time of the next scan (the budget deferred it, or a request ended the pass; a pass with credit
// builds every due view before the next scan, so a thread slowed by the machine shows in the lag, not here).
// Once a second the scheduler publishes the fleet's cmestream_views_stale (how many), cmestream_view_lag_pairs (pairs
// learned and not yet in a view, summed over the models) and cmestream_view_stale_age_max_seconds (the oldest stale
// view's time since its last refresh), and every model's view_age_seconds; ModelInfo.view.lag_pairs gives one model's
// lag (Model::Describe). No thread or timer per model: one pass over the registry a tick, models refreshed one after
// another on this thread.
class RefreshScheduler {
 public:
  static constexpr double kPeriodicIdlePerBuild = 9;
  // The default --refresh-budget: a quarter of one core (docs/benchmarks.md "Fleets: refresh budget").
  static constexpr double kDefaultRefreshBudget = 0.25;
  // The default Options::burst_seconds.
  static constexpr double kBurstSeconds = 1;
  // The fleet's staleness series and the models' view ages are published this often.
  static constexpr double kReportSeconds = 1;
  // The background triggers are checked this often (a scan reads every model's counters under
  // its locks; requests are queued and served every tick).
  static constexpr double kScanSeconds = 0.25;

  using Clock = std::chrono::steady_clock;
  struct Options {
    double tick_seconds = 0.05;  // polling period; also the resolution of waits and requests
    // --evict-idle-seconds (0: never): the sweep evicts models idle this long
    // (ModelRegistry::EvictIdle) on a thread of its own ("cme-evict"), every kSweepSeconds,
    // for at most kSweepBudgetSeconds a sweep: off the refresh thread, so that a fleet's
    // evictions keep up with the models its feed finishes (docs/benchmarks.md "Fleets").
    double evict_idle_seconds = 0;
    // --refresh-budget: the share of one core the background refreshes may use, > 0 (values
    // above the cores leave them unbounded).
    double refresh_budget = kDefaultRefreshBudget;
    // The credit held at most, in seconds of the budget (a burst after an idle spell).
    double burst_seconds = kBurstSeconds;
    // Tests only: the clock the scheduler reads (null: Clock::now), and the CPU seconds charged
    // for each refresh instead of the measured ones (0: measured). With both, the budget's
    // decisions depend on the sequence of calls alone (RunOnceForTesting).
    std::function<Clock::time_point()> clock = nullptr;
    double charge_per_refresh_for_testing = 0;
  };
  static constexpr double kSweepSeconds = 0.25;
  static constexpr double kSweepBudgetSeconds = 1;
  // malloc_trim after evictions at most this often (it walks the heap's free chunks).
  static constexpr double kTrimSeconds = 1;
  using Callback = std::function<void(absl::StatusOr<std::shared_ptr<const ModelView>>)>;

  // requires: registry outlives the scheduler.
  RefreshScheduler(ModelRegistry& registry, Options options);
  ~RefreshScheduler() { Stop(); }

  void Start();
  // Ends the pass of refreshes in progress after the view being built and joins the thread;
  // pending waiters get Unavailable; later Wait calls fail at once. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Asks for a refresh of `model` at the next tick (served whatever the budget).
  void Request(std::shared_ptr<Model> model) ABSL_LOCKS_EXCLUDED(mu_);
  // Requests a refresh and calls `done` exactly once: with the first view reflecting at least
  // `target` learned pairs (Model::Stats::progress; possibly immediately, on the caller's thread), DeadlineExceeded at
  // `deadline`, NotFound if the model is deleted meanwhile, Unavailable at shutdown.
  void Wait(std::shared_ptr<Model> model, uint64_t target, Clock::time_point deadline, Callback done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // One tick (the refreshes due, the waiters; not the eviction sweep) on the caller's thread.
  // Tests only; requires: Start() was not called.
  void RunOnceForTesting() { Tick(); }
  // The budget's credit in CPU seconds (negative: a debt). Tests only, from the ticking thread.
  double credit_for_testing() const { return credit_; }

 private:
  struct Waiter {
    std::shared_ptr<Model> model;
    uint64_t target;
    Clock::time_point deadline;
    Callback done;
  };
  void Tick();
  Clock::time_point Now() const { return options_.clock ? options_.clock() : Clock::now(); }
  void RefreshDueModels() ABSL_LOCKS_EXCLUDED(mu_);
  // Lists the models whose background trigger fired, oldest refresh first, into due_; reports
  // the staleness the previous scan's leftovers show (at most every kReportSeconds).
  void Scan(Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);
  // Builds `model`'s view now and charges its CPU time to the budget (the scheduler thread only).
  std::shared_ptr<const ModelView> RefreshCharged(Model& model, bool requested);
  void CompleteWaiters() ABSL_LOCKS_EXCLUDED(mu_);
  void SweepIdleModels();  // the eviction thread only

  ModelRegistry& registry_;
  const Options options_;
  Clock::time_point last_trim_ = Clock::now();  // the eviction thread only
  int evicted_since_trim_ = 0;                  // the eviction thread only
  // The budget (the scheduler thread only): credit in CPU seconds, and when it was last credited.
  double credit_;
  Clock::time_point credited_at_;
  Clock::time_point reported_at_{};  // the last staleness report (kReportSeconds)
  Clock::time_point scanned_at_{};   // the last Scan (kScanSeconds)
  struct Due {
    std::shared_ptr<Model> model;
    Clock::time_point since;  // its last refresh: the oldest goes first
  };
  std::vector<Due> due_;  // the last scan's due models, oldest refresh first (the scheduler thread only)
  size_t next_due_ = 0;   // due_[next_due_..] are not refreshed yet
  // A Request or Wait arrived: ends a pass of background refreshes early.
  std::atomic<bool> request_pending_{false};
  // Stop was called: a pass of refreshes ends after the view being built (a large budget's pass
  // over thousands of due models would otherwise hold up the shutdown for its whole length).
  std::atomic<bool> stop_pass_{false};
  PeriodicThread thread_;        // every tick_seconds, or at once when woken by Request / Wait
  PeriodicThread evict_thread_;  // every kSweepSeconds: SweepIdleModels
  // Lock order (service/README.md "Locks"): taken before the registry's lock and a model's
  // view lock (CompleteWaiters looks models up under it); never held while a view is built.
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Model>> requests_ ABSL_GUARDED_BY(mu_);  // Request, Wait: served next tick
};

}  // namespace cmestream::service
