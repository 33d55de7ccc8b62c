// Prints one line per learner configuration: a 64-bit FNV-1a hash of the learner's serialized
// state after a fixed stream, and of what its replies read (the snapshot's forecast skill, the
// prequential score). A change that must keep the arithmetic bit-identical (sharing a computed
// value between estimators, say) is checked by diffing this output before and after it:
//
//   ./build/tests/bench/learner_state_digest > before.txt   (at the earlier commit)
//   ./build/tests/bench/learner_state_digest > after.txt && diff before.txt after.txt
//
// The streams cover trajectories (y_t = x_{t+1}), the same pairs sent as unordered pairs, and
// shuffled pairs (no point repeats), at d = 2, 8, 64 and 512, pair by pair (micro_batch 1) and
// in runs, with and without lag statistics, the latent model, input scaling and a prequential
// score installed part way. Then the change alarms on their own (core/alarms) at d = 1, 2 (every
// test) and 8 (the size test) on a stream whose regime switches, at a high alarm rate so that
// restarts, holdovers and records are in the state, and a discrete monitor.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/alarms/alarm_monitor.h"
#include "core/counts/transition_counts.h"
#include "core/io/binary_io.h"
#include "core/spectral/prequential_score.h"
#include "core/stream/streaming_learner.h"
#include "tests/bench/delay_states.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

using bench::DelayStates;

using test_support::Fnv1a;

uint64_t FnvDouble(double v, uint64_t h) { return Fnv1a(&v, sizeof v, h); }

enum class Form { kTrajectory, kPairs, kShuffled };

struct Config {
  int dim;
  int64_t pairs;
  Form form;
  int micro_batch;
  bool lags;
  bool latent;
  bool scale;  // auto sigma with input scaling (else a fixed sigma)
  int rff;
  bool prequential;
};

std::unique_ptr<PrequentialVampE> MakePrequential(const StreamingLearner& l, uint64_t seed) {
  std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
  if (!snap || !snap->cme) return nullptr;
  auto model = std::make_shared<PrequentialModel>();
  const RowMatrixXd& atoms = snap->cme->x_atoms;
  const Eigen::Index m = std::min<Eigen::Index>(atoms.rows(), 40);
  model->basis = atoms.topRows(m);
  model->sigma = snap->spectral ? snap->spectral->sigma : 1.0;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  model->vamp.su.resize(m + 1, 3);
  model->vamp.v.resize(m + 1, 3);
  for (Eigen::Index i = 0; i < m + 1; ++i) {
    for (int k = 0; k < 3; ++k) {
      model->vamp.su(i, k) = g(rng);
      model->vamp.v(i, k) = g(rng);
    }
  }
  return std::make_unique<PrequentialVampE>(std::move(model));
}

std::string Run(const Config& c) {
  StreamingLearner::Options o;
  o.dim = c.dim;
  o.cme.dim = c.dim;
  o.cme.sigma = c.scale ? 0.0 : 0.5 * std::sqrt(static_cast<double>(c.dim));
  o.cme.max_dict = 300;
  o.scale_inputs = c.scale;
  o.auto_sigma_warmup = 200;
  o.seed = 11;
  o.rff_features = c.rff;
  o.latent = c.latent;
  o.reservoir = 500;
  o.window = 2;
  o.lags = c.lags ? std::vector<int>{1, 3} : std::vector<int>{};
  o.micro_batch = c.micro_batch;
  if (!o.Validate().ok()) return "invalid options";
  StreamingLearner l(o);
  const RowMatrixXd s = DelayStates(c.pairs, c.dim, 5);
  RowMatrixXd x = s.topRows(c.pairs), y = s.bottomRows(c.pairs);
  if (c.form == Form::kShuffled) {
    std::vector<int64_t> perm(static_cast<size_t>(c.pairs));
    for (int64_t i = 0; i < c.pairs; ++i) perm[static_cast<size_t>(i)] = i;
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(9));
    RowMatrixXd xs(c.pairs, c.dim), ys(c.pairs, c.dim);
    for (int64_t i = 0; i < c.pairs; ++i) {
      xs.row(i) = x.row(perm[static_cast<size_t>(i)]);
      ys.row(i) = y.row(perm[static_cast<size_t>(i)]);
    }
    x.swap(xs);
    y.swap(ys);
  }
  uint64_t replies = test_support::kFnvBasis;
  bool installed = false;
  // Batches of 37 pairs: boundaries fall off the run grid.
  for (int64_t first = 0; first < c.pairs; first += 37) {
    const int64_t n = std::min<int64_t>(37, c.pairs - first);
    StreamBatch b;
    b.n = n;
    b.dim = c.dim;
    b.producer = "p";
    if (c.form == Form::kTrajectory) {
      b.x = s.row(first).data();
      b.y = s.row(first + 1).data();
      b.trajectory = true;
    } else {
      b.x = x.row(first).data();
      b.y = y.row(first).data();
    }
    absl::StatusOr<ObserveSummary> r = l.Observe(b);
    if (!r.ok()) return std::string(r.status().message());
    replies = Fnv1a(&r->admitted_x, sizeof r->admitted_x, replies);
    replies = FnvDouble(r->forced_error, replies);
    if (c.prequential && !installed && first >= c.pairs / 3) {
      std::unique_ptr<PrequentialVampE> p = MakePrequential(l, 3);
      if (p) {
        l.InstallPrequential(std::move(p), 1);
        installed = true;
      }
    }
  }
  std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
  if (snap) {
    if (snap->forecast) {
      replies = FnvDouble(snap->forecast->skill.sse, replies);
      replies = FnvDouble(snap->forecast->skill.sse_persistence, replies);
    }
    if (snap->prequential) replies = FnvDouble(snap->prequential->score, replies);
    if (snap->cme) replies = Fnv1a(snap->cme->W.data(), sizeof(double) * snap->cme->W.size(), replies);
  }
  io::Writer w;
  l.Serialize(w);
  const std::string bytes = w.Release();
  char line[160];
  std::snprintf(line, sizeof line, "state %016" PRIx64 " (%zu bytes) replies %016" PRIx64,
                Fnv1a(bytes.data(), bytes.size()), bytes.size(), replies);
  return line;
}

// A monitor's state hash, size and alarm count.
std::string MonitorLine(const AlarmMonitor& m) {
  io::Writer w;
  m.Serialize(w);
  const std::string bytes = w.Release();
  char line[160];
  std::snprintf(line, sizeof line, "state %016" PRIx64 " (%zu bytes) alarms %" PRId64,
                Fnv1a(bytes.data(), bytes.size()), bytes.size(), m.alarms_total());
  return line;
}

std::string RunAlarms(int dim) {
  AlarmMonitor::Options o;
  o.dim = dim;
  o.channels = dim;
  o.alarm_rate = AlarmMonitor::kMaxAlarmRate;
  if (!o.Validate().ok()) return "invalid options";
  AlarmMonitor m(o);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n01;
  std::vector<double> x(static_cast<size_t>(dim)), y(static_cast<size_t>(dim));
  for (double& v : x) v = n01(rng);
  // An AR(1) whose coefficient and noise switch every 700 pairs; runs of 1 and of 53 pairs.
  std::vector<double> run_x, run_y;
  for (int t = 0; t < 4000; ++t) {
    const bool b = (t / 700) % 2 == 1;
    for (int j = 0; j < dim; ++j) y[j] = (b ? -0.5 : 0.8) * x[j] + (b ? 0.6 : 0.3) * n01(rng);
    run_x.insert(run_x.end(), x.begin(), x.end());
    run_y.insert(run_y.end(), y.begin(), y.end());
    const int64_t n = static_cast<int64_t>(run_x.size()) / dim;
    if (t < 2000 || n == 53) {
      m.ObservePairs(run_x.data(), run_y.data(), n, 1000.0 + t);
      run_x.clear();
      run_y.clear();
    }
    x.swap(y);
  }
  return MonitorLine(m);
}

std::string RunDiscreteAlarms() {
  TransitionCounts::Options co;
  co.max_states = 4;
  TransitionCounts counts(co);
  AlarmMonitor::Options o;
  o.num_states = 4;
  o.alarm_rate = AlarmMonitor::kMaxAlarmRate;
  AlarmMonitor m(o);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u;
  int64_t s = 0;
  for (int t = 0; t < 4000; ++t) {
    int64_t next = s;
    const double v = u(rng);
    if ((t / 700) % 2 == 0) {
      if (v > 0.9) next = static_cast<int64_t>(u(rng) * 4) % 4;
    } else if (v < 0.6) {
      next = (s + 1) % 4;
    }
    m.ObserveIds(s, next, counts, 1000.0 + t);
    if (!counts.AddBatch(&s, &next, 1).ok()) return "counts failed";
    s = next;
  }
  return MonitorLine(m);
}

// A discrete model (counts, discrete predictive sums, lags, alarms) on a 6-state chain.
std::string RunDiscreteLearner() {
  StreamingLearner::Options o;
  o.num_states = 6;
  o.window = 2;
  o.lags = {1, 3};
  o.alarms = true;
  o.seed = 11;
  if (!o.Validate().ok()) return "invalid options";
  StreamingLearner l(o);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u;
  std::vector<int64_t> ids(3001);
  ids[0] = 0;
  for (size_t t = 1; t < ids.size(); ++t) {
    const double v = u(rng);
    ids[t] = v < 0.8 ? ids[t - 1] : (v < 0.95 ? (ids[t - 1] + 1) % 6 : static_cast<int64_t>(u(rng) * 6) % 6);
  }
  for (int64_t first = 0; first < 3000; first += 37) {
    StreamBatch b;
    b.n = std::min<int64_t>(37, 3000 - first);
    b.x_ids = ids.data() + first;
    b.y_ids = ids.data() + first + 1;
    b.trajectory = true;
    b.producer = "p";
    absl::StatusOr<ObserveSummary> r = l.Observe(b);
    if (!r.ok()) return std::string(r.status().message());
  }
  io::Writer w;
  l.Serialize(w);
  const std::string bytes = w.Release();
  char line[160];
  std::snprintf(line, sizeof line, "state %016" PRIx64 " (%zu bytes)", Fnv1a(bytes.data(), bytes.size()), bytes.size());
  return line;
}

}  // namespace
}  // namespace cmestream

int main() {
  using cmestream::Config;
  using cmestream::Form;
  const char* forms[] = {"trajectory", "pairs", "shuffled"};
  std::vector<Config> configs;
  for (int d : {2, 8, 64}) {
    for (Form f : {Form::kTrajectory, Form::kPairs, Form::kShuffled}) {
      for (int mb : {1, 256}) {
        configs.push_back({d, 3000, f, mb, true, d <= 8, false, 32, true});
        configs.push_back({d, 3000, f, mb, false, false, true, 256, true});
      }
    }
  }
  configs.push_back({512, 1500, Form::kTrajectory, 256, true, false, false, 256, true});
  configs.push_back({512, 1500, Form::kPairs, 256, true, false, true, 128, true});
  configs.push_back({512, 600, Form::kTrajectory, 1, true, false, false, 64, true});
  for (const Config& c : configs) {
    std::printf("d=%d pairs=%" PRId64 " %s micro_batch=%d lags=%d latent=%d scale=%d rff=%d prequential=%d: %s\n",
                c.dim, c.pairs, forms[static_cast<int>(c.form)], c.micro_batch, c.lags, c.latent, c.scale, c.rff,
                c.prequential, cmestream::Run(c).c_str());
    std::fflush(stdout);
  }
  for (int d : {1, 2, 8}) std::printf("alarms d=%d: %s\n", d, cmestream::RunAlarms(d).c_str());
  std::printf("alarms discrete: %s\n", cmestream::RunDiscreteAlarms().c_str());
  std::printf("discrete learner: %s\n", cmestream::RunDiscreteLearner().c_str());
  return 0;
}
