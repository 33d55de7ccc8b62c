// CompressedCme::Serialize / Deserialize, declared in core/cme/compressed_cme.h. Framing:
// core/io/binary_io.h; field lists: core/io/field_io.h (CONTRIBUTING.md "Binary formats").
// Object "CCME": the options (what the constructor needs), the scalars, then the live blocks of
// the buffers. Capacity-sized buffers are written as their live blocks only: outside the live
// block they hold zeros both in a fresh object and in the running one (the learner only writes
// inside it), and the round-trip tests compare the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include "core/cme/compressed_cme.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

// Version 2 stores the whitened W~ and the inverse Cholesky factors R_X, R_Y; version 1 stored W
// and the Gram inverses, and loads by factorizing the stored Grams.
constexpr io::ObjectFormat kFormat = {io::Fourcc("CCME"), 2, "CompressedCme"};

// CompressedCme: what the constructor needs, then the learner's counters (docs/algorithms.md §1).
constexpr auto kCmeOptionFields = [](auto& f, auto& o) {
  f.Scalars("cme", io::Field("dim", o.dim), io::Field("sigma", o.sigma), io::Field("eta", o.eta),
            io::Field("lambda", o.lambda), io::Field("epsilon", o.epsilon), io::Field("max_dict", o.max_dict),
            io::Field("one_sided", o.one_sided), io::Field("jitter", o.jitter),
            io::Field("drift_tolerance", o.drift_tolerance));
  f.NonNegativeI64("cme drift_check_interval", o.drift_check_interval);
  f.Scalars("cme", io::Field("step_decay_samples", o.step_decay_samples),
            io::Field("step_decay_power", o.step_decay_power), io::Field("averaging", o.averaging));
};

constexpr auto kCmeCounterFields = [](auto& f, auto& c) {
  f.Counters("cme", io::Counter("samples", c.samples), io::Counter("compressed", c.compressed),
             io::Counter("admitted_x", c.admitted_x), io::Counter("admitted_y", c.admitted_y),
             io::Counter("forced", c.forced));
  f.F64("cme forced_error_sum", c.forced_error_sum);
  f.NonNegativeI64("cme refactorizations", c.refactorizations);
};

}  // namespace

void CompressedCme::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  kCmeOptionFields(f, options_);
  kCmeCounterFields(f, counters_);
  w.I32(mx_);
  w.I32(my_);
  w.F64(last_drift_);
  w.I32(last_nearest_x_);
  w.I32(last_nearest_y_in_x_);
  w.U8(static_cast<uint8_t>(last_step_));
  w.F64(last_error_);
  w.I64(negative_delta_events_);
  w.I64(samples_since_drift_check_);
  w.Matrix(x_atoms_.topRows(mx_));
  w.Matrix(y_atoms_.topRows(my_));
  w.Matrix(wf_.topLeftCorner(my_, mx_));
  if (options_.averaging) w.Matrix(wf_avg_.topLeftCorner(my_, mx_));
  w.Matrix(gx_.topLeftCorner(mx_, mx_));
  w.Matrix(gy_.topLeftCorner(my_, my_));
  w.Matrix(rx_.topLeftCorner(mx_, mx_));
  w.Matrix(ry_.topLeftCorner(my_, my_));
}

absl::StatusOr<CompressedCme> CompressedCme::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kCmeOptionFields);
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  const int64_t cap = o.max_dict;
  io::FieldReader f(r);
  Counters c;
  kCmeCounterFields(f, c);
  const int mx = r.I32In("cme dictionary size m_x", 0, cap);
  const int my = r.I32In("cme dictionary size m_y", 0, cap);
  const double last_drift = r.F64("cme last_drift");
  const int nearest_x = r.I32In("cme last_nearest_x", -1, cap - 1);
  const int nearest_y = r.I32In("cme last_nearest_y_in_x", -1, cap - 1);
  const uint8_t step = r.U8("cme last_step");
  if (r.ok() && step > static_cast<uint8_t>(Step::kForced))
    (void)r.Fail(absl::StrCat("cme last_step is ", int{step}, ", expected 0..5"));
  const double last_error = r.F64("cme last_error");
  const int64_t negative = r.NonNegativeI64("cme negative_delta_events");
  const int64_t since_check = r.NonNegativeI64("cme samples_since_drift_check");
  if (!r.ok()) return r.status();
  // The buffers hold 6 (7 with averaging) capacity^2 matrices, the atoms and the scratch
  // vectors; the capacity follows the dictionary size (CompressedCme::Reserve), at most max_dict.
  // The body holds the live blocks (atoms, W, the Grams and their inverses) in full: refuse a
  // size the remaining bytes cannot hold before allocating capacity for it.
  const int64_t matrices = o.averaging ? 8 : 7;
  const int64_t live_doubles =
      int64_t{mx + my} * o.dim + int64_t{mx} * my * (o.averaging ? 2 : 1) + 2 * (int64_t{mx} * mx + int64_t{my} * my);
  if (!r.Expect(static_cast<uint64_t>(8 * live_doubles + 16 * matrices), "CompressedCme atoms and matrices")) {
    return r.status();
  }
  const int64_t live = std::max(mx, my);
  int64_t room = 16;
  while (room < live) room *= 2;
  room = std::min(room, cap);
  if (!r.Reserve(io::DoubleBytes((o.averaging ? 7 : 6) * room * room + 2 * room * o.dim + 8 * room),
                 "CompressedCme buffers")) {
    return r.status();
  }

  CompressedCme cme(o);
  cme.Reserve(static_cast<int>(live));  // same capacity rule as growth
  cme.counters_ = c;
  cme.mx_ = mx;
  cme.my_ = my;
  cme.last_drift_ = last_drift;
  cme.last_nearest_x_ = nearest_x;
  cme.last_nearest_y_in_x_ = nearest_y;
  cme.last_step_ = static_cast<Step>(step);
  cme.last_error_ = last_error;
  cme.negative_delta_events_ = negative;
  cme.samples_since_drift_check_ = since_check;
  r.MatrixInto("cme x_atoms", cme.x_atoms_.topRows(mx));
  r.MatrixInto("cme y_atoms", cme.y_atoms_.topRows(my));
  const bool v1 = version == 1;
  r.MatrixInto(v1 ? "cme W" : "cme W whitened", cme.wf_.topLeftCorner(my, mx));
  if (o.averaging) r.MatrixInto(v1 ? "cme W average" : "cme W whitened average", cme.wf_avg_.topLeftCorner(my, mx));
  r.MatrixInto("cme Gram X", cme.gx_.topLeftCorner(mx, mx));
  r.MatrixInto("cme Gram Y", cme.gy_.topLeftCorner(my, my));
  // Version 1's Gram inverses are read into the factors' buffers and replaced below.
  r.MatrixInto(v1 ? "cme Gram X inverse" : "cme R_X", cme.rx_.topLeftCorner(mx, mx));
  r.MatrixInto(v1 ? "cme Gram Y inverse" : "cme R_Y", cme.ry_.topLeftCorner(my, my));
  if (!r.EndObject(kFormat.name)) return r.status();
  if (v1) {
    // W = R_Y^T W~ R_X with identity factors is the stored W; Refactorize() factorizes the
    // stored Grams and re-expresses W~ (and its average) in the new bases. Not counted as a
    // re-factorization of the learner.
    cme.rx_.topLeftCorner(mx, mx).setIdentity();
    cme.ry_.topLeftCorner(my, my).setIdentity();
    const int64_t refactorizations = cme.counters_.refactorizations;
    if (!cme.Refactorize()) {
      return r.Fail("CompressedCme version 1: a stored Gram is not positive definite with its jitter; cannot convert");
    }
    cme.counters_.refactorizations = refactorizations;
  }
  return cme;
}

}  // namespace cmestream
