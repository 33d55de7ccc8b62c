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
// score installed part way.
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

#include "core/io/binary_io.h"
#include "core/spectral/prequential_score.h"
#include "core/stream/streaming_learner.h"
#include "tests/bench/delay_states.h"

namespace cmestream {
namespace {

using bench::DelayStates;

uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ULL) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

uint64_t FnvDouble(double v, uint64_t h) { return Fnv(&v, sizeof v, h); }

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
  uint64_t replies = 1469598103934665603ULL;
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
    replies = Fnv(&r->admitted_x, sizeof r->admitted_x, replies);
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
    if (snap->cme) replies = Fnv(snap->cme->W.data(), sizeof(double) * snap->cme->W.size(), replies);
  }
  io::Writer w;
  l.Serialize(w);
  const std::string bytes = w.Release();
  char line[160];
  std::snprintf(line, sizeof line, "state %016" PRIx64 " (%zu bytes) replies %016" PRIx64,
                Fnv(bytes.data(), bytes.size()), bytes.size(), replies);
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
  return 0;
}
