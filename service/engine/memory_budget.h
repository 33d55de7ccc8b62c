// The daemon's memory budget (--max-memory): what one model may grow to, estimated from its
// config alone, and what the machine (or the container's cgroup) allows.
//
// Why estimates of the worst case: a model's matrices grow with its dictionary up to max_dict
// and with its statistics' sizes, all fixed by the config; refusing at creation is the only
// point where refusing loses nothing. A model that fits the budget can always reach its
// configured size. Views (refresh) and queries have their own transient working sets:
// refreshes run one at a time (a reserve is kept for one), queries are bounded per request
// (--max-query-mb).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"

namespace cmestream::service {

// Bytes a model built from `config` (normalized) may hold at its configured limits: learner
// matrices at max_dict, counts, RFF moments, spectral moments (live and frozen epoch), latent
// reservoir and moments, predictive-state statistics, the sigma warm-up buffer, and its latest
// view. EstimateModelBytesAt(config, max_dict).
double EstimateModelBytes(const v1::ModelConfig& config);
// The estimate by part (bytes each; parts a config does not have are 0).
struct ModelMemoryEstimate {
  double model = 0;        // the Model object, its producer map and bookkeeping
  double cme = 0;          // CompressedCme at the capacity
  double counts = 0;       // transition counts over the atoms (discrete: over the ids)
  double rff_moments = 0;  // the embedding's random-feature moments
  double alarms = 0;       // the change alarms' forecast sums
  double warmup = 0;       // the sigma "auto" warm-up buffer
  double micro_batch = 0;  // the open CME run and its scratch
  double forecast = 0;     // the forecast regression's sums
  double spectral = 0;     // the spectral moments (live and frozen epochs)
  double lags = 0;         // the lag statistics
  double latent = 0;       // the latent accumulator and reservoir
  double predictive = 0;   // the predictive-state accumulator
  double view = 0;         // the latest view
  double total() const;
  // (name, bytes) of every part, in the order above.
  std::vector<std::pair<const char*, double>> Terms() const;
};
// The sizes a model's state is allocated at (what it holds; ModelShape::AtCapacity: the most it
// may hold at a dictionary capacity).
struct ModelShape {
  double capacity = 0;         // the CME's dictionary capacity (CompressedCme::capacity)
  double atoms = 0;            // atoms per side in it (the view's copies are sized by them)
  double spectral_live = 0;    // the spectral moments' live basis (StreamingLearner::SpectralBasesNow)
  double spectral_frozen = 0;  // and their frozen epoch's basis
  // Every size at `capacity`: the most a model may hold at that capacity (a spectral re-base
  // takes at most the dictionary's atoms).
  static ModelShape AtCapacity(double capacity);
};
// What a model of `config` holds at `shape`, by part. A discrete model's parts do not depend on
// the shape. Within the stated tolerances of tests/service/engine/test_memory_budget.cc
// (EstimateFollowsWhatALearnerHolds: the heap a fed learner and its view hold).
ModelMemoryEstimate EstimateModelMemory(const v1::ModelConfig& config, const ModelShape& shape);
// The same with the dictionary at `atoms` per side (clamped to [0, max_dict]) and every
// dictionary-sized part at that size (ModelShape::AtCapacity): the most the model holds there.
double EstimateModelBytesAt(const v1::ModelConfig& config, double atoms);
// The CME's first dictionary capacity (CompressedCme::Reserve): 16, 32, 64, ... capped at max_dict.
inline constexpr int kInitialDictionaryCapacity = 16;
// The capacity a dictionary of `atoms` per side sits in: the smallest 16 * 2^k >= atoms, capped
// at max_dict (CompressedCme::Reserve's rule).
int DictionaryCapacity(int atoms, int max_dict);
// What a new model is charged (its floor): EstimateModelBytesAt its first capacity.
double EstimateEmptyModelBytes(const v1::ModelConfig& config);

// The daemon's memory ledger (--max-memory): the bytes its models hold or were granted, by
// their actual dictionary capacities (EstimateModelBytesAt), never their configured worst case.
//   - A model is admitted (created, imported, forked) when its floor fits what is left.
//   - A model's dictionary grows (a capacity step, asked for before each batch: Model) only
//     while the committed bytes stay within 1 - kReserve of the budget (the last 5 % stay for
//     the floors of models created later, whatever the models and the batches in flight
//     hold), and, once they pass kTight of the budget, only up to its fair share of that
//     part, kTight x budget / models. A model that may not grow learns on at its current
//     dictionary (forced projections, as at max_dict); nothing it was sent is refused.
// Lock-free (atomics): charged from the ingest workers without the registry lock.
class MemoryLedger {
 public:
  static constexpr double kTight = 0.9;
  static constexpr double kReserve = 0.05;
  // budget <= 0: unlimited (every admission and growth allowed, still counted).
  explicit MemoryLedger(double budget = 0) : budget_(budget) {}
  // requires: before the ledger is shared between threads.
  void set_budget(double budget) { budget_ = budget; }
  double budget() const { return budget_; }
  double committed() const { return static_cast<double>(committed_.load()); }
  int64_t models() const { return models_.load(); }
  // Counts a model of `bytes` if committed + bytes <= budget; false (nothing counted) otherwise.
  bool TryAdmit(double bytes);
  // Counts a model whatever the budget (replay and restore: what was accepted then).
  void Admit(double bytes);
  // A model and the bytes it held go.
  void Remove(double bytes);
  // A model holding `held` bytes grows by `extra` > 0: allowed (and counted) when committed +
  // extra <= (1 - kReserve) x budget and either committed + extra <= kTight x budget or held +
  // extra <= kTight x budget / models (its fair share).
  bool TryGrow(double held, double extra);
  // Counts `extra` whatever the budget (a replayed batch's logged cap); negative: released.
  void Adjust(double extra);

 private:
  double budget_;
  std::atomic<int64_t> committed_{0};
  std::atomic<int64_t> models_{0};
};

// The default budget: 0.8 x the cgroup memory limit (v2 memory.max, v1
// memory.limit_in_bytes) when one is set, else 0.8 x physical memory.
double DefaultMemoryBudget();
// The memory the daemon can have: the cgroup limit if set and below physical memory, else
// physical memory; 0 if unknown.
double HostMemoryLimit();
// OK unless `budget` (--max-memory, bytes) exceeds `host` (HostMemoryLimit(); 0: unknown, no
// check): then InvalidArgument with both sizes, since such a budget never refuses a model that
// the machine cannot hold.
absl::Status CheckMemoryBudgetFitsHost(double budget, double host);

// "1073741824", "512M", "8G", "1.5GiB", "2T" (K/M/G/T powers of 1024; optional "B"/"iB").
absl::StatusOr<double> ParseByteSize(const std::string& text);

// "1.5 GiB" style, for messages.
std::string FormatBytes(double bytes);

}  // namespace cmestream::service
