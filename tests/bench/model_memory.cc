// What a model holds after a stream, per component, against what the daemon's memory budget
// charges it (service/engine/memory_budget.h; docs/benchmarks.md "1,000 8-channel models"). For
// each of N default models of C channels fed P pairs of a real-shaped series (two cycles of
// random periods and phases mixed into the channels, Gaussian noise, 0-2 level shifts: the
// recipe of scripts/fleet_loadgen.py, drawn with another generator), as 200-pair trajectory
// batches of one producer and episode, it prints:
//   - the heap the learner holds (glibc's mallinfo2, in-use bytes before and after building and
//     feeding it: transient buffers freed by then are not counted);
//   - the heap of each part of the learner's snapshot (the copy a refresh takes: each part's
//     state without its scratch), each copied alone;
//   - the heap of the fitted views (FitViews), and the bytes of the serialized learner (an
//     evicted model's file is these bytes plus ~1 kB of config and counters), per object;
//   - what the budget charges it (EstimateModelMemory at the learner's sizes), per term, and
//     the most a model holds at that capacity (EstimateModelBytesAt).
//   build/tests/bench/model_memory [--channels C] [--pairs P] [--models N] [--seed S]
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/io/binary_io.h"
#include "core/stream/learner_view.h"
#include "core/stream/streaming_learner.h"
#include "service/engine/memory_budget.h"
#include "service/engine/model_config.h"
#include "tests/service/engine/real_shaped_series.h"

namespace cs = cmestream::service;
using cmestream::StreamBatch;
using cmestream::StreamingLearner;

namespace {

double InUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}
double MiB(double b) { return b / (1024.0 * 1024.0); }

// The outermost tagged objects in `bytes` (learner fields between them are counted as "other"):
// a known tag, a version in [1, 64] and a length that fits mark an object, skipped whole.
std::map<std::string, double> ObjectBytes(const std::string& bytes) {
  static const char* kTags[] = {"CCME", "CNTS", "EMOM", "MVAC", "PSAC", "SPMO", "LAGS", "FCRG", "ALRM"};
  std::map<std::string, double> out;
  size_t i = 0, other = 0;
  while (i + 16 <= bytes.size()) {
    bool found = false;
    for (const char* tag : kTags) {
      if (std::memcmp(bytes.data() + i, tag, 4) != 0) continue;
      uint32_t version = 0;
      uint64_t length = 0;
      std::memcpy(&version, bytes.data() + i + 4, 4);
      std::memcpy(&length, bytes.data() + i + 8, 8);
      if (version < 1 || version > 64 || length > bytes.size() - i - 16) continue;
      out[tag] += 16.0 + static_cast<double>(length);
      i += 16 + length;
      found = true;
      break;
    }
    if (!found) {
      ++i;
      ++other;
    }
  }
  out["other"] = static_cast<double>(other + (bytes.size() - std::min(bytes.size(), i)));
  return out;
}

// Heap of a copy of `part` (held while measured).
template <typename T>
double CopyBytes(const T& part) {
  const double before = InUse();
  auto copy = std::make_unique<T>(part);
  const double after = InUse();
  return after - before;
}

}  // namespace

int main(int argc, char** argv) {
  int channels = 8, pairs = 2000, models = 3;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--channels") channels = std::max(1, v);
    else if (flag == "--pairs") pairs = std::max(1, v);
    else if (flag == "--models") models = std::max(1, v);
    else if (flag == "--seed") seed = static_cast<uint64_t>(v);
    else {
      std::fprintf(stderr, "usage: model_memory [--channels C] [--pairs P] [--models N] [--seed S]\n");
      return 2;
    }
  }
  cmestream::v1::ModelConfig raw;
  raw.set_name("m");
  raw.set_dim(static_cast<uint32_t>(channels));
  absl::StatusOr<cmestream::v1::ModelConfig> config = cs::NormalizeModelConfig(raw, {});
  if (!config.ok()) {
    std::fprintf(stderr, "model_memory: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  const StreamingLearner::Options options = cs::LearnerOptionsFor(*config);
  std::printf("model_memory: %d default models of %d channels, %d pairs each (rff_features %u, max_dict %u)\n", models,
              channels, pairs, config->rff_features(), config->max_dict());
  std::printf("floor (an empty model's charge) %.2f MiB; the most at max_dict %.2f MiB\n",
              MiB(cs::EstimateEmptyModelBytes(*config)), MiB(cs::EstimateModelBytes(*config)));
  for (int k = 0; k < models; ++k) {
    const std::vector<double> rows = cmestream::test_support::RealShapedSeries(k, pairs + 1, channels, seed);
    const double h0 = InUse();
    auto learner = std::make_unique<StreamingLearner>(options);
    for (int off = 0; off < pairs; off += 200) {
      StreamBatch b;
      b.n = std::min(200, pairs - off);
      b.dim = channels;
      b.x = rows.data() + static_cast<size_t>(off) * channels;
      b.y = b.x + channels;
      b.trajectory = true;
      b.producer = "p";
      b.episode = "e";
      if (absl::StatusOr<cmestream::ObserveSummary> s = learner->Observe(b); !s.ok()) {
        std::fprintf(stderr, "model_memory: %s\n", std::string(s.status().message()).c_str());
        return 1;
      }
    }
    const double held = InUse() - h0;
    const cmestream::CompressedCme* cme = learner->cme();
    const int atoms = cme ? std::max(cme->dict_x_size(), cme->dict_y_size()) : 0;
    const int capacity = cme ? cme->capacity() : 0;
    const double h1 = InUse();
    std::optional<cmestream::StreamingLearnerSnapshot> snap = learner->Snapshot();
    const double snap_bytes = InUse() - h1;
    if (!snap) {
      std::printf("model %d: still in its warm-up\n", k);
      continue;
    }
    std::printf(
        "\nmodel %d: %d atoms (capacity %d), spectral basis %d; learner heap %.2f MiB, CME's own count %.2f MiB\n", k,
        atoms, capacity, learner->spectral_basis(), MiB(held), cme ? MiB(static_cast<double>(cme->HeapBytes())) : 0.0);
    std::printf("  snapshot (a refresh's copy) %.2f MiB:", MiB(snap_bytes));
    if (snap->cme) std::printf(" cme %.2f", MiB(CopyBytes(*snap->cme)));
    std::printf(" counts %.2f", MiB(CopyBytes(snap->counts)));
    if (snap->moments) std::printf(" rff-moments %.2f", MiB(CopyBytes(*snap->moments)));
    if (snap->spectral) {
      std::printf(" spectral %.2f (basis %d, frozen moments %d)", MiB(CopyBytes(*snap->spectral)),
                  static_cast<int>(snap->spectral->basis.rows()),
                  static_cast<int>(snap->spectral->frozen.c00[0].rows()));
    }
    if (snap->lags) std::printf(" lags %.2f", MiB(CopyBytes(*snap->lags)));
    if (snap->forecast) std::printf(" forecast %.2f", MiB(CopyBytes(*snap->forecast)));
    if (snap->latent) std::printf(" latent %.2f", MiB(CopyBytes(*snap->latent)));
    if (snap->predictive) std::printf(" predictive %.2f", MiB(CopyBytes(*snap->predictive)));
    std::printf(" (MiB)\n");
    const double h2 = InUse();
    absl::StatusOr<cmestream::LearnerView> view = cmestream::FitViews(*snap, cs::ViewOptionsFor(*config));
    const double view_bytes = InUse() - h2;
    if (!view.ok()) {
      std::fprintf(stderr, "model_memory: %s\n", std::string(view.status().message()).c_str());
      return 1;
    }
    std::printf("  views %.2f MiB:", MiB(view_bytes));
    if (view->cme) std::printf(" koopman+cme %.2f", MiB(CopyBytes(*view->cme)));
    if (view->counts.value) std::printf(" counts %.2f", MiB(CopyBytes(*view->counts.value)));
    if (view->embedding.value) std::printf(" embedding %.2f", MiB(CopyBytes(*view->embedding.value)));
    if (view->clusters.value) std::printf(" clusters %.2f", MiB(CopyBytes(*view->clusters.value)));
    if (view->aggregation.value) std::printf(" aggregation %.2f", MiB(CopyBytes(*view->aggregation.value)));
    if (view->lags.value) std::printf(" lags %.2f", MiB(CopyBytes(*view->lags.value)));
    if (view->forecast.value) std::printf(" forecast %.2f", MiB(CopyBytes(*view->forecast.value)));
    std::printf(" (MiB)\n");
    view = absl::InternalError("released");
    snap.reset();
    cmestream::io::Writer w;
    learner->Serialize(w);
    std::printf("  serialized learner %.2f MiB:", MiB(static_cast<double>(w.size())));
    for (const auto& [tag, bytes] : ObjectBytes(w.data())) std::printf(" %s %.2f", tag.c_str(), MiB(bytes));
    std::printf(" (MiB)\n");
    cs::ModelShape shape;
    shape.capacity = capacity;
    shape.atoms = atoms;
    const StreamingLearner::SpectralBases bases = learner->SpectralBasesNow();
    shape.spectral_live = bases.live;
    shape.spectral_frozen = bases.frozen;
    const cs::ModelMemoryEstimate e = cs::EstimateModelMemory(*config, shape);
    std::printf("  charged (spectral bases %d, %d): %.2f MiB:", bases.live, bases.frozen, MiB(e.total()));
    for (const auto& [name, bytes] : e.Terms()) std::printf(" %s %.2f", name, MiB(bytes));
    std::printf(" (MiB); charged / (learner + views) %.2f; the most at capacity %d (ModelShape::AtCapacity) %.2f MiB\n",
                e.total() / (held + view_bytes), capacity, MiB(cs::EstimateModelBytesAt(*config, capacity)));
  }
  return 0;
}
