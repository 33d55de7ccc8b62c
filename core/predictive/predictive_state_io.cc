// PredictiveStateAccumulator::Serialize / Deserialize, declared in core/predictive/predictive_state.h. Framing:
// core/io/binary_io.h; field lists: core/io/field_io.h (CONTRIBUTING.md "Binary formats").
// Object "PSAC": the options (what the constructor needs), the scalars, then the live blocks of
// the buffers. Capacity-sized buffers are written as their live blocks only: outside the live
// block they hold zeros both in a fresh object and in the running one (the learner only writes
// inside it), and the round-trip tests compare the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include "core/predictive/predictive_state.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("PSAC"), 1, "PredictiveStateAccumulator"};

// PredictiveStateAccumulator (§4), after the kind.
constexpr auto kPredictiveOptionFields = [](auto& f, auto& o) {
  using Kind = PredictiveStateAccumulator::Kind;
  f.Choice("predictive kind", o.kind, Kind::kDiscrete, Kind::kLinearGaussian, "0 (discrete) or 1");
  f.Scalars("predictive", io::Field("num_symbols", o.num_symbols), io::Field("dim", o.dim),
            io::Field("history_length", o.history_length), io::Field("future_length", o.future_length),
            io::Field("max_history_states", o.max_history_states));
};

// PredictiveStateAccumulator::Statistics: the sums of the kind, then the initial-state sum; when
// reading, sized already.
constexpr auto kPredictiveStatisticsFields = [](auto& f, auto& s, bool discrete) {
  if (discrete) {
    f.Matrices("predictive", io::Matrix("diag(A)", s.a_diag), io::Matrix("B_psi", s.B_psi), io::Matrix("B_xi", s.B_xi),
               io::Matrix("pair counts", s.pair_counts));
  } else {
    f.Matrices("predictive", io::Matrix("A", s.A), io::Matrix("B_e", s.B_e), io::Matrix("E", s.E));
  }
  f.Matrix("predictive sum_e", s.sum_e);
};

}  // namespace

void PredictiveStateAccumulator::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  kPredictiveOptionFields(f, options_);
  f.Counters("predictive", io::Counter("windows", windows_), io::Counter("observations", observations_),
             io::Counter("in_episode", in_episode_));
  w.I32(ring_pos_);
  w.Matrix(ring_);
  kPredictiveStatisticsFields(f, stats_, options_.kind == Kind::kDiscrete);
}

absl::StatusOr<PredictiveStateAccumulator> PredictiveStateAccumulator::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kPredictiveOptionFields);
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  // `stored`: the statistics the body holds in full; `values`: those plus the scratch vectors.
  int64_t stored = 0, values = 0, window_len = 0;
  if (o.kind == Kind::kDiscrete) {
    int64_t dh = 1;
    for (int i = 0; i < o.history_length; ++i) dh *= o.num_symbols;  // Validate bounds S^H
    const int64_t S = o.num_symbols;
    stored = values = dh * (1 + S + S * S) + S * S + S;
    window_len = o.history_length + 2;
  } else {
    const int64_t p = o.dim, H = o.history_length, F = o.future_length;
    stored = p * H * p * H + p * H * p * (F + 1) + p * (F + 1) * p * (F + 1) + p * (F + 1);
    values = stored + p * (F + 1) * p * (F + 1) + p * (F + 1) + p * H;
    window_len = H + F + 1;
  }
  // A body too short for the statistics it must hold is refused before allocating for them.
  if (!r.Expect(io::DoubleBytes(stored + window_len * o.dim), "PredictiveStateAccumulator statistics"))
    return r.status();
  if (!r.Reserve(io::DoubleBytes(values + window_len * o.dim), "PredictiveStateAccumulator statistics"))
    return r.status();
  io::FieldReader f(r);
  int64_t windows = 0, observations = 0, in_episode = 0;
  f.Counters("predictive", io::Counter("windows", windows), io::Counter("observations", observations),
             io::Counter("in_episode", in_episode));
  const int ring_pos = r.I32In("predictive ring position", 0, window_len - 1);
  if (!r.ok()) return r.status();
  PredictiveStateAccumulator a(o);
  a.windows_ = windows;
  a.observations_ = observations;
  a.in_episode_ = in_episode;
  a.ring_pos_ = ring_pos;
  r.MatrixInto("predictive ring", a.ring_);
  kPredictiveStatisticsFields(f, a.stats_, o.kind == Kind::kDiscrete);
  if (!r.EndObject(kFormat.name)) return r.status();
  return a;
}

}  // namespace cmestream
