#include "service/engine/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/stream/streaming_learner.h"
#include "service/engine/lags.h"
#include "service/engine/model_config.h"

namespace cmestream::service {
namespace {

constexpr double kDouble = 8;

// A positive number from a one-line file, or 0 ("max", missing, unreadable, absurd).
double ReadLimitFile(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !(v > 0) || v >= 9e18) return 0;  // v1's "no limit" is ~2^63
  return v;
}

}  // namespace

double EstimateModelBytes(const v1::ModelConfig& c) { return EstimateModelBytesAt(c, c.max_dict()); }

int DictionaryCapacity(int atoms, int max_dict) {
  // CompressedCme::Reserve's rule: 16 * 2^k, capped at max_dict.
  int cap = kInitialDictionaryCapacity;
  while (cap < atoms && cap < max_dict) cap *= 2;
  return std::max(1, std::min(cap, max_dict));
}

double EstimateEmptyModelBytes(const v1::ModelConfig& c) {
  return EstimateModelBytesAt(c, DictionaryCapacity(0, static_cast<int>(c.max_dict())));
}

double ModelMemoryEstimate::total() const {
  double sum = 0;
  for (const auto& [name, bytes] : Terms()) sum += bytes;
  return sum;
}

std::vector<std::pair<const char*, double>> ModelMemoryEstimate::Terms() const {
  return {{"model", model},       {"cme", cme},       {"counts", counts},           {"rff-moments", rff_moments},
          {"alarms", alarms},     {"warmup", warmup}, {"micro-batch", micro_batch}, {"forecast", forecast},
          {"spectral", spectral}, {"lags", lags},     {"latent", latent},           {"predictive", predictive},
          {"view", view}};
}

ModelShape ModelShape::AtCapacity(double capacity) {
  ModelShape s;
  s.capacity = s.atoms = s.spectral_live = s.spectral_frozen = capacity;
  return s;
}

double EstimateModelBytesAt(const v1::ModelConfig& c, double atoms) {
  return EstimateModelMemory(c, ModelShape::AtCapacity(atoms)).total();
}

ModelMemoryEstimate EstimateModelMemory(const v1::ModelConfig& c, const ModelShape& shape) {
  ModelMemoryEstimate e;
  const bool discrete = c.num_states() > 0;
  const double p = c.num_states();
  const double d = StateDim(c);
  const double max_dict = c.max_dict();
  const auto clamp = [max_dict](double v) { return std::min(std::max(v, 0.0), max_dict); };
  e.model = 64 * 1024;  // the Model object, producer map, view bookkeeping
  if (discrete) {
    // Sparse counts: assume a dense worst case up to 16 successors per state on average.
    e.counts = p * std::min(p, 16.0) * 32;
    if (p <= 2048) e.view = 4 * p * p * kDouble;  // dense embedding / clusters view (P x P)
  } else {
    const double m = clamp(shape.capacity);
    const double atoms = std::min(clamp(shape.atoms), m);
    // CME (CompressedCme::HeapBytes): W~ (and its average), both Grams and their inverse
    // factors, allocated at the capacity; atoms; per-pair scratch.
    e.cme = (c.averaging() ? 6 : 5) * m * m * kDouble + 2 * m * d * kDouble + 16 * m * kDouble;
    // Sparse counts over the atoms: at most 16 successors per atom on average (measured: under
    // 2 at 2,000 pairs of an 8-channel stream).
    e.counts = atoms * std::min(atoms, 16.0) * 32;
    const double n = c.rff_features();
    e.rff_moments = 3 * n * n * kDouble;                                   // RFF moments S_x, S_y, P_h
    if (HasAlarms(c)) e.alarms = (2 * d * d + 4 * d * c.dim()) * kDouble;  // alarm forecast sums, its refit
    e.warmup = 2.0 * c.auto_sigma_warmup() * d * kDouble;                  // sigma "auto" warm-up buffer
    // Spectral moments (core/spectral/spectral_moments.h): C00, C01, C11 per fold over the
    // b + 1 features of the live epoch's basis and of the frozen one (6 (b+1)^2 doubles each),
    // and the flush scratch (2 x 64 x (b+1)). The basis is re-based rarely (at 5x the pairs of
    // the previous re-base), to at most the dictionary's atoms (plus 12 landmarks).
    for (const double b : {clamp(shape.spectral_live), clamp(shape.spectral_frozen)}) {
      if (b > 0) e.spectral += 6 * (b + 1) * (b + 1) * kDouble;
    }
    if (shape.spectral_live > 0) e.spectral += 2 * 64 * (clamp(shape.spectral_live) + 1) * kDouble;
    // Micro-batches (docs/algorithms.md §9.2): the open run's pairs and lag states (4 R + 1
    // rows of d doubles, R = run_pairs() of the default micro_batch) and ObserveBatch's scratch
    // (8 m x 128 doubles and 128 x 128 blocks; counted as 10 m x 128 + 128 x 128).
    StreamingLearner::Options learner;  // the daemon's micro_batch is the learner's default
    learner.dim = static_cast<int>(StateDim(c));
    const double run = learner.run_pairs();
    e.micro_batch = (4 * run + 1) * d * kDouble + (10 * m * 128 + 128 * 128) * kDouble;
    // Forecast regression (core/forecast/forecast_regression.h; dim <= 256): 5 folds plus two
    // refit copies of q x q and q x d sums (q = d + F, F = forecast_features) in the learner. The
    // two more copies a refresh makes while it fits (the snapshot copy and the fit's complements)
    // are a refresh's working set, held by one model at a time (refreshes run one after another)
    // and left to the memory the budget does not give to models (the default budget is 0.8 of
    // the machine); charged to every model they were 2/3 of an empty 1-channel model's floor.
    if (d <= 256) {
      const double q = d + static_cast<double>(c.forecast_features());
      e.forecast = 7 * (q * q + q * d) * kDouble;
    }
    // The latest view (core/stream/learner_view.h): the CME snapshot and Koopman decomposition
    // over the atoms (measured 0.5-1.3 atoms^2 doubles), the embedding (its RFF basis and
    // eigenvectors, under 2 N^2 doubles), the lag view (about the lag statistics' size, below).
    // Koopman's and the forecast's other fit-time matrices are the refresh's working set, held
    // by the model being refreshed only (refreshes run one after another), and left to the
    // memory the budget does not give to models, as the snapshot copy a refresh fits from.
    e.view = 1.5 * atoms * atoms * kDouble + 2 * n * n * kDouble;
  }
  // Lag statistics (core/validation/lag_statistics.h): per lag and block (16 + the open one),
  // two D x D sums with D = P one-hot ids (discrete, P <= kMaxLagStates) or the Koopman basis
  // (k + 1, k = min(kLagBasisAtoms, atoms): the basis is picked from the X atoms) plus the count
  // chain over the basis atoms (continuous).
  if (HasLagStatistics(c)) {
    const double lags = std::max(1, c.lags_size()), blocks = 17;
    const double basis = std::min<double>(kLagBasisAtoms, std::min(std::max(shape.atoms, 0.0), max_dict));
    const double dim = discrete ? p : basis + 1.0;
    const double per_lag = discrete ? 2 * dim * dim : 2 * (dim * dim + (dim - 1) * (dim - 1));
    e.lags = blocks * lags * per_lag * kDouble;
    if (!discrete) e.view += e.lags;  // the lag view's copies of them
  }
  if (c.latent_states() > 0) {
    const double f = discrete ? p : c.rff_features();
    e.latent = 3 * f * f * kDouble + 3.0 * c.reservoir() * d * kDouble;
  }
  if (c.window() > 0) {
    if (discrete) {
      e.predictive = std::pow(p, c.window()) * (p * p + p + 1) * kDouble;
    } else {
      const double side = d * (2.0 * c.window() + 1);
      e.predictive = 3 * side * side * kDouble;
    }
  }
  return e;
}

namespace {
int64_t Bytes(double b) { return static_cast<int64_t>(std::ceil(std::max(b, 0.0))); }
}  // namespace

bool MemoryLedger::TryAdmit(double bytes) {
  const int64_t add = Bytes(bytes);
  int64_t now = committed_.load();
  do {
    if (budget_ > 0 && static_cast<double>(now + add) > budget_) return false;
  } while (!committed_.compare_exchange_weak(now, now + add));
  models_.fetch_add(1);
  return true;
}

void MemoryLedger::Admit(double bytes) {
  committed_.fetch_add(Bytes(bytes));
  models_.fetch_add(1);
}

void MemoryLedger::Remove(double bytes) {
  committed_.fetch_sub(Bytes(bytes));
  models_.fetch_sub(1);
}

bool MemoryLedger::TryGrow(double held, double extra) {
  const int64_t add = Bytes(extra);
  int64_t now = committed_.load();
  do {
    if (budget_ > 0) {
      const double after = static_cast<double>(now + add);
      // Growth (and the grants of batches in flight) never fills the last kReserve of the
      // budget: it stays for the floors of new models (admission).
      if (after > (1 - kReserve) * budget_) return false;
      // Past kTight, a model grows only within its share of kTight x budget.
      const double share = kTight * budget_ / static_cast<double>(std::max<int64_t>(1, models_.load()));
      if (after > kTight * budget_ && held + static_cast<double>(add) > share) return false;
    }
  } while (!committed_.compare_exchange_weak(now, now + add));
  return true;
}

void MemoryLedger::Adjust(double extra) { committed_.fetch_add(extra >= 0 ? Bytes(extra) : -Bytes(-extra)); }

double HostMemoryLimit() {
  double limit = ReadLimitFile("/sys/fs/cgroup/memory.max");
  if (limit <= 0) limit = ReadLimitFile("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const double physical = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  if (limit <= 0 || (physical > 0 && limit > physical)) limit = physical;
  return limit > 0 ? limit : 0;
}

double DefaultMemoryBudget() {
  double limit = HostMemoryLimit();
  if (limit <= 0) limit = 4.0 * (1ull << 30);  // unknown: assume a small machine
  return 0.8 * limit;
}

absl::Status CheckMemoryBudgetFitsHost(double budget, double host) {
  if (host <= 0 || budget <= host) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("flag --max-memory is ", FormatBytes(budget), ", but this host (or its cgroup memory limit) has ",
                   FormatBytes(host),
                   ": a budget the machine cannot hold would admit models that cannot all reach their "
                   "configured size; expected at most ",
                   FormatBytes(host), " (without the flag the budget is 0.8 x that, ", FormatBytes(0.8 * host), ")"));
}

absl::StatusOr<double> ParseByteSize(const std::string& text) {
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                               text[end] == 'e' || text[end] == 'E' || text[end] == '+')) {
    ++end;
  }
  double value = 0;
  if (end == 0 || !absl::SimpleAtod(text.substr(0, end), &value) || !(value >= 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError("expected a size such as 8G, 512M or a number of bytes");
  }
  std::string unit = text.substr(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() >= 2 && unit.substr(unit.size() - 2) == "IB") unit.resize(unit.size() - 2);
  else if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  double scale = 1;
  if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    return absl::InvalidArgumentError(absl::StrCat("unknown unit '", text.substr(end), "' (K, M, G, T)"));
  return value * scale;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return absl::StrFormat("%.3g %s", bytes, units[u]);
}

}  // namespace cmestream::service
