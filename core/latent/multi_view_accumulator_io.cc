// MultiViewAccumulator::Serialize / Deserialize, declared in core/latent/latent_model.h. Framing:
// core/io/binary_io.h; field lists: core/io/field_io.h (CONTRIBUTING.md "Binary formats").
// Object "MVAC": the options (what the constructor needs), the scalars, then the live blocks of
// the buffers. Capacity-sized buffers are written as their live blocks only: outside the live
// block they hold zeros both in a fresh object and in the running one (the learner only writes
// inside it), and the round-trip tests compare the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include "core/latent/latent_model.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"
#include "core/latent/latent_rff_v1.h"

namespace cmestream {
namespace {

// Version 2 stores the RFF map's Omega and beta after the options; version 1 stored the seed only,
// its features drawn by an algorithm of its own (LatentRffVersion1).
constexpr io::ObjectFormat kFormat = {io::Fourcc("MVAC"), 2, "MultiViewAccumulator"};

// MultiViewAccumulator (§3), after the feature kind.
constexpr auto kLatentOptionFields = [](auto& f, auto& o) {
  using Kind = LatentFeatureOptions::Kind;
  f.Choice("latent feature kind", o.features.kind, Kind::kRff, Kind::kOneHot, "0 (RFF) or 1 (one-hot)");
  f.Scalars("latent", io::Field("dim", o.features.dim), io::Field("num_features", o.features.num_features),
            io::Field("sigma", o.features.sigma), io::Field("num_symbols", o.features.num_symbols),
            io::Field("seed", o.features.seed), io::Field("reservoir_size", o.reservoir_size),
            io::Field("reservoir_seed", o.reservoir_seed), io::Field("batch", o.batch));
};

}  // namespace

void MultiViewAccumulator::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  const bool rff = options_.features.kind == LatentFeatureOptions::Kind::kRff;
  kLatentOptionFields(f, options_);
  // The map itself, not only its seed: an accumulator restored from version 1 keeps the
  // features its moments were accumulated with (LatentRffVersion1), and writing them makes every
  // later version independent of how they were drawn (d D + D doubles, next to 3 D^2 moments).
  if (rff) {
    w.Matrix(map_->omega());
    w.Matrix(map_->beta());
  }
  w.I64(triples_);
  w.I64(in_episode_);
  w.I32(slot_);
  w.I32(pending_);
  w.I64(reservoir_fill_);
  std::ostringstream rng;
  rng << rng_;
  w.String(rng.str());
  w.Matrix(feat_);
  w.Matrix(raw_);
  w.Matrix(pa_.leftCols(pending_));
  w.Matrix(pb_.leftCols(pending_));
  w.Matrix(pc_.leftCols(pending_));
  w.Matrix(c_ab_);
  w.Matrix(c_cb_);
  w.Matrix(c_ca_);
  w.Matrix(reservoir_.topRows(reservoir_fill_));
}

absl::StatusOr<MultiViewAccumulator> MultiViewAccumulator::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kLatentOptionFields);
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  const bool rff = o.features.kind == LatentFeatureOptions::Kind::kRff;
  const int64_t D = o.features.size(), d = o.features.dim;
  if (!r.Reserve(io::DoubleBytes(3 * D + 3 * d + 3 * D * o.batch + 3 * D * D + int64_t{o.reservoir_size} * 3 * d +
                                 (rff ? d * D + D : 0)),
                 "MultiViewAccumulator buffers")) {
    return r.status();
  }
  std::shared_ptr<const FeatureMap> map;
  if (!rff) {
    map = MakeLatentFeatureMap(o.features);
  } else if (version == 1) {
    // The features this object was accumulated with.
    absl::StatusOr<std::shared_ptr<const FeatureMap>> drawn = LatentRffVersion1(o.features);
    if (!drawn.ok()) return r.Fail(absl::StrCat("latent feature map: ", drawn.status().message()));
    map = *std::move(drawn);
  } else {
    MatrixXd omega(d, D);
    VectorXd beta(D);
    r.MatrixInto("latent Omega", omega);
    r.MatrixInto("latent beta", beta);
    if (!r.ok()) return r.status();
    absl::StatusOr<FeatureMap> stored =
        FeatureMap::RffFrom(std::move(omega), std::move(beta), o.features.sigma, o.features.seed);
    if (!stored.ok()) return r.Fail(absl::StrCat("latent feature map: ", stored.status().message()));
    map = std::make_shared<const FeatureMap>(*std::move(stored));
  }
  const int64_t triples = r.NonNegativeI64("latent triples");
  const int64_t in_episode = r.NonNegativeI64("latent in_episode");
  const int slot = r.I32In("latent slot", 0, 2);
  const int pending = r.I32In("latent pending", 0, o.batch - 1);
  const int64_t fill = r.Count("latent reservoir fill", 0, o.reservoir_size);
  const std::string rng_text = r.String("latent rng state", 1 << 16);
  if (!r.ok()) return r.status();
  MultiViewAccumulator m(o, std::move(map));
  m.triples_ = triples;
  m.in_episode_ = in_episode;
  m.slot_ = slot;
  m.pending_ = pending;
  m.reservoir_fill_ = fill;
  std::istringstream rng(rng_text);
  rng >> m.rng_;
  if (rng.fail()) return r.Fail("latent rng state does not parse as a std::mt19937_64 state");
  r.MatrixInto("latent features ring", m.feat_);
  r.MatrixInto("latent raw ring", m.raw_);
  r.MatrixInto("latent pending a", m.pa_.leftCols(pending));
  r.MatrixInto("latent pending b", m.pb_.leftCols(pending));
  r.MatrixInto("latent pending c", m.pc_.leftCols(pending));
  r.MatrixInto("latent C_ab", m.c_ab_);
  r.MatrixInto("latent C_cb", m.c_cb_);
  r.MatrixInto("latent C_ca", m.c_ca_);
  r.MatrixInto("latent reservoir", m.reservoir_.topRows(fill));
  if (!r.EndObject(kFormat.name)) return r.status();
  return m;
}

}  // namespace cmestream
