// Serialize()/Deserialize() of the streaming learners (declared in their headers; framing in
// core/io/binary_io.h). Kept in one file so that the on-disk layout of every learner can be
// read in one place. Each object: fourcc tag, version (1; the latent accumulator 2), then the
// options (what the constructor needs), the scalars, then the live blocks of the buffers.
// Capacity-sized buffers are written as their live blocks only: outside the live block they
// hold zeros both in a fresh object and in the running one (the learners only write inside
// it), and the round-trip test compares the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include <algorithm>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/cme/compressed_cme.h"
#include "core/counts/transition_counts.h"
#include "core/embedding/state_embedding.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"
#include "core/latent/latent_model.h"
#include "core/latent/latent_rff_v1.h"
#include "core/predictive/predictive_state.h"
#include "core/spectral/spectral_moments.h"

namespace cmestream {
namespace {

constexpr uint32_t kCmeTag = io::Fourcc("CCME");
constexpr uint32_t kCountsTag = io::Fourcc("CNTS");
constexpr uint32_t kMomentsTag = io::Fourcc("EMOM");
constexpr uint32_t kLatentTag = io::Fourcc("MVAC");
constexpr uint32_t kPredictiveTag = io::Fourcc("PSAC");
constexpr uint32_t kSpectralTag = io::Fourcc("SPMO");
constexpr uint32_t kVersion = 1;
// CompressedCme: version 2 stores the whitened W~ and the inverse Cholesky factors R_X, R_Y;
// version 1 stored W and the Gram inverses, and loads by factorizing the stored Grams.
constexpr uint32_t kCmeVersion = 2;
// MultiViewAccumulator: version 2 stores the RFF map's Omega and beta after the options; version
// 1 stored the seed only, its features drawn by an algorithm of its own (LatentRffVersion1).
constexpr uint32_t kLatentVersion = 2;
// SpectralMoments: version 2 stores rebase_growth and min_block_length after the options;
// version 1 loads with the behaviour it was written with (rebase_growth 1: a re-base at every
// outgrowth; min_block_length = block_length: fixed blocks). Version 3 appends the landmarks
// (docs/algorithms.md §7.2) and is written only by an accumulator that has some; earlier
// versions load without any.
constexpr uint32_t kSpectralVersion = 3;

uint64_t Doubles(int64_t n) { return static_cast<uint64_t>(n) * 8; }

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

// TransitionCounts (§2).
constexpr auto kCountsOptionFields = [](auto& f, auto& o) {
  f.Scalars("counts", io::Field("max_states", o.max_states), io::Field("forgetting", o.forgetting),
            io::Field("row_reserve", o.row_reserve));
};

// SpectralMoments (§7): version 1 ends before rebase_growth and min_block_length.
constexpr auto kSpectralOptionFields = [](auto& f, auto& o, uint32_t version) {
  f.I32In("spectral dim", o.dim, 1, CompressedCme::kMaxDim);
  f.F64("spectral sigma", o.sigma);
  f.I32In("spectral max_basis", o.max_basis, 1, 1 << 16);
  f.I32In("spectral batch_size", o.batch_size, 1, 1 << 20);
  f.Scalars("spectral", io::Field("block_length", o.block_length), io::Field("forgetting", o.forgetting),
            io::Field("new_atom_fraction", o.new_atom_fraction), io::Field("min_epoch_samples", o.min_epoch_samples));
  if (version < 2) return;
  f.Scalars("spectral", io::Field("rebase_growth", o.rebase_growth), io::Field("min_block_length", o.min_block_length));
};

// One epoch's counters and weights; its sums follow as matrices.
constexpr auto kSpectralEpochFields = [](auto& f, auto& e) {
  f.Counters("spectral", io::Counter("epoch", e.epoch), io::Counter("epoch samples", e.samples),
             io::Counter("fold A samples", e.fold_samples[0]), io::Counter("fold B samples", e.fold_samples[1]));
  f.Scalars("spectral", io::Field("scale", e.scale), io::Field("fold A weight", e.n[0]),
            io::Field("fold B weight", e.n[1]));
};

// EmbeddingMoments, after its feature map.
constexpr auto kMomentsOptionFields = [](auto& f, auto& o) {
  f.I32In("moments batch_size", o.batch_size, 1, 1 << 20);
  f.F64("moments forgetting", o.forgetting);
};

// MultiViewAccumulator (§3), after the feature kind.
constexpr auto kLatentOptionFields = [](auto& f, auto& o) {
  using Kind = LatentFeatureOptions::Kind;
  f.Choice("latent feature kind", o.features.kind, Kind::kRff, Kind::kOneHot, "0 (RFF) or 1 (one-hot)");
  f.Scalars("latent", io::Field("dim", o.features.dim), io::Field("num_features", o.features.num_features),
            io::Field("sigma", o.features.sigma), io::Field("num_symbols", o.features.num_symbols),
            io::Field("seed", o.features.seed), io::Field("reservoir_size", o.reservoir_size),
            io::Field("reservoir_seed", o.reservoir_seed), io::Field("batch", o.batch));
};

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
    f.Matrix("predictive diag(A)", s.a_diag);
    f.Matrix("predictive B_psi", s.B_psi);
    f.Matrix("predictive B_xi", s.B_xi);
    f.Matrix("predictive pair counts", s.pair_counts);
  } else {
    f.Matrix("predictive A", s.A);
    f.Matrix("predictive B_e", s.B_e);
    f.Matrix("predictive E", s.E);
  }
  f.Matrix("predictive sum_e", s.sum_e);
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// CompressedCme

void CompressedCme::Serialize(io::Writer& w) const {
  const size_t h = w.BeginObject(kCmeTag, kCmeVersion);
  io::FieldWriter f(w);
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
  w.EndObject(h);
}

absl::StatusOr<CompressedCme> CompressedCme::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kCmeTag, kCmeVersion, "CompressedCme", kCmeOptionFields);
  if (!r.ValidOptions(o, "CompressedCme")) return r.status();
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
  if (!r.Reserve(Doubles((o.averaging ? 7 : 6) * room * room + 2 * room * o.dim + 8 * room), "CompressedCme buffers")) {
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
  if (!r.EndObject("CompressedCme")) return r.status();
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

// ---------------------------------------------------------------------------------------------
// TransitionCounts

void TransitionCounts::Serialize(io::Writer& w) const {
  const size_t h = w.BeginObject(kCountsTag, kVersion);
  io::FieldWriter f(w);
  kCountsOptionFields(f, options_);
  w.I32(num_states_);
  w.I64(samples_);
  w.I64(nnz_);
  w.F64(scale_);
  w.F64(total_stored_);
  w.Doubles(visits_stored_.data(), num_states_);
  for (int i = 0; i < num_states_; ++i) {
    const std::vector<Entry>& row = rows_[i];
    w.U64(row.size());
    for (const Entry& e : row) {
      w.I32(e.j);
      w.F64(e.stored);
    }
  }
  w.EndObject(h);
}

absl::StatusOr<TransitionCounts> TransitionCounts::Deserialize(io::Reader& r) {
  const auto [version, o] =
      io::ReadObjectStart<Options>(r, kCountsTag, kVersion, "TransitionCounts", kCountsOptionFields);
  if (!r.ValidOptions(o, "TransitionCounts")) return r.status();
  // rows_ (one empty vector each) and visits_stored_.
  if (!r.Reserve(static_cast<uint64_t>(o.max_states) * (sizeof(std::vector<Entry>) + 8), "TransitionCounts rows")) {
    return r.status();
  }
  const int num_states = r.I32In("counts num_states", 0, o.max_states);
  const int64_t samples = r.NonNegativeI64("counts samples");
  const int64_t nnz = r.NonNegativeI64("counts nonzeros");
  const double scale = r.F64("counts scale");
  const double total = r.F64("counts total_stored");
  if (!r.ok()) return r.status();
  if (!(scale >= 1)) return r.Fail(absl::StrCat("counts scale is ", scale, ", expected >= 1"));
  TransitionCounts t(o);
  t.num_states_ = num_states;
  t.samples_ = samples;
  t.nnz_ = nnz;
  t.scale_ = scale;
  t.total_stored_ = total;
  r.Doubles("counts visits", num_states, t.visits_stored_.data());
  int64_t seen = 0;
  for (int i = 0; i < num_states && r.ok(); ++i) {
    const int64_t n = r.Count("counts row length", 0, num_states);
    // Each entry is 12 bytes on disk: bounded by the bytes left before reserving.
    if (!r.ok() || n * 12 > static_cast<int64_t>(r.remaining())) {
      return r.Fail(absl::StrCat("counts row ", i, " claims ", n, " entries, more than the bytes left"));
    }
    std::vector<Entry>& row = t.rows_[i];
    row.reserve(std::max<int64_t>(n, o.row_reserve));
    int prev = -1;
    for (int64_t k = 0; k < n; ++k) {
      const int j = r.I32In("counts column", 0, num_states - 1);
      const double stored = r.F64("counts value");
      if (r.ok() && j <= prev) {
        return r.Fail(absl::StrCat("counts row ", i, ": columns not increasing (", prev, " then ", j, ")"));
      }
      prev = j;
      row.push_back(Entry{j, stored});
    }
    seen += n;
  }
  if (r.ok() && seen != nnz) return r.Fail(absl::StrCat("counts hold ", seen, " entries but the header says ", nnz));
  if (!r.EndObject("TransitionCounts")) return r.status();
  return t;
}

// ---------------------------------------------------------------------------------------------
// EmbeddingMoments

void EmbeddingMoments::Serialize(io::Writer& w) const {
  const size_t h = w.BeginObject(kMomentsTag, kVersion);
  const bool rff = features_->kind() == FeatureMap::Kind::kRff;
  w.Bool(rff);
  w.I32(features_->input_dim());
  w.I32(features_->num_features());
  w.F64(features_->sigma());
  w.U64(features_->seed());
  // Two generated values, to detect a generator that differs from the writer's.
  w.F64(rff ? features_->omega()(0, 0) : 0.0);
  w.F64(rff ? features_->beta()(features_->num_features() - 1) : 0.0);
  io::FieldWriter f(w);
  kMomentsOptionFields(f, options_);
  w.I64(samples_);
  w.F64(scale_);
  w.F64(n_stored_);
  w.I32(buffered_);
  w.Matrix(sx_);
  w.Matrix(sy_);
  w.Matrix(ph_);
  if (rff) {
    w.Matrix(xbuf_.topRows(buffered_));
    w.Matrix(ybuf_.topRows(buffered_));
  }
  w.EndObject(h);
}

absl::StatusOr<EmbeddingMoments> EmbeddingMoments::Deserialize(io::Reader& r) {
  uint32_t version = 0;
  if (!r.BeginObject(kMomentsTag, kVersion, "EmbeddingMoments", &version)) return r.status();
  const bool rff = r.Bool("moments feature kind");
  const int dim = r.I32In("moments input dim", 1, 1 << 20);
  const int n = r.I32In("moments num_features", 1, 1 << 20);
  const double sigma = r.F64("moments sigma");
  const uint64_t seed = r.U64("moments seed");
  const double omega00 = r.F64("moments omega check");
  const double beta_last = r.F64("moments beta check");
  io::FieldReader f(r);
  Options o;
  kMomentsOptionFields(f, o);
  if (!r.ValidOptions(o, "EmbeddingMoments")) return r.status();
  const int64_t nn = n;
  const int64_t b = rff ? o.batch_size : 0;
  if (!r.Reserve(Doubles(3 * nn * nn + b * (2 * int64_t{dim} + 2 * nn + 1) + (rff ? dim * nn + nn : 0)),
                 "EmbeddingMoments buffers")) {
    return r.status();
  }
  absl::StatusOr<FeatureMap> map = rff ? FeatureMap::Rff(dim, n, sigma, seed) : FeatureMap::OneHot(n);
  if (!map.ok()) return r.Fail(absl::StrCat("moments feature map: ", map.status().message()));
  if (rff && (map->omega()(0, 0) != omega00 || map->beta()(n - 1) != beta_last)) {
    return r.Fail(
        "moments: the random Fourier features regenerated from the seed differ from the ones that "
        "wrote this snapshot (different generator build); cannot continue bit-exactly");
  }
  const int64_t samples = r.NonNegativeI64("moments samples");
  const double scale = r.F64("moments scale");
  const double n_stored = r.F64("moments n");
  const int buffered = r.I32In("moments buffered", 0, rff ? o.batch_size - 1 : 0);
  if (!r.ok()) return r.status();
  EmbeddingMoments m(std::make_shared<const FeatureMap>(*std::move(map)), o);
  m.samples_ = samples;
  m.scale_ = scale;
  m.n_stored_ = n_stored;
  m.buffered_ = buffered;
  r.MatrixInto("moments S_x", m.sx_);
  r.MatrixInto("moments S_y", m.sy_);
  r.MatrixInto("moments P_h", m.ph_);
  if (rff) {
    r.MatrixInto("moments x buffer", m.xbuf_.topRows(buffered));
    r.MatrixInto("moments y buffer", m.ybuf_.topRows(buffered));
  }
  if (!r.EndObject("EmbeddingMoments")) return r.status();
  return m;
}

// ---------------------------------------------------------------------------------------------
// MultiViewAccumulator

void MultiViewAccumulator::Serialize(io::Writer& w) const {
  const size_t h = w.BeginObject(kLatentTag, kLatentVersion);
  const bool rff = options_.features.kind == LatentFeatureOptions::Kind::kRff;
  io::FieldWriter f(w);
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
  w.EndObject(h);
}

absl::StatusOr<MultiViewAccumulator> MultiViewAccumulator::Deserialize(io::Reader& r) {
  const auto [version, o] =
      io::ReadObjectStart<Options>(r, kLatentTag, kLatentVersion, "MultiViewAccumulator", kLatentOptionFields);
  if (!r.ValidOptions(o, "MultiViewAccumulator")) return r.status();
  const bool rff = o.features.kind == LatentFeatureOptions::Kind::kRff;
  const int64_t D = o.features.size(), d = o.features.dim;
  if (!r.Reserve(Doubles(3 * D + 3 * d + 3 * D * o.batch + 3 * D * D + int64_t{o.reservoir_size} * 3 * d +
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
  if (!r.EndObject("MultiViewAccumulator")) return r.status();
  return m;
}

// ---------------------------------------------------------------------------------------------
// PredictiveStateAccumulator

void PredictiveStateAccumulator::Serialize(io::Writer& w) const {
  const size_t h = w.BeginObject(kPredictiveTag, kVersion);
  io::FieldWriter f(w);
  kPredictiveOptionFields(f, options_);
  f.Counters("predictive", io::Counter("windows", windows_), io::Counter("observations", observations_),
             io::Counter("in_episode", in_episode_));
  w.I32(ring_pos_);
  w.Matrix(ring_);
  kPredictiveStatisticsFields(f, stats_, options_.kind == Kind::kDiscrete);
  w.EndObject(h);
}

absl::StatusOr<PredictiveStateAccumulator> PredictiveStateAccumulator::Deserialize(io::Reader& r) {
  const auto [version, o] =
      io::ReadObjectStart<Options>(r, kPredictiveTag, kVersion, "PredictiveStateAccumulator", kPredictiveOptionFields);
  if (!r.ValidOptions(o, "PredictiveStateAccumulator")) return r.status();
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
  if (!r.Expect(Doubles(stored + window_len * o.dim), "PredictiveStateAccumulator statistics")) return r.status();
  if (!r.Reserve(Doubles(values + window_len * o.dim), "PredictiveStateAccumulator statistics")) return r.status();
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
  if (!r.EndObject("PredictiveStateAccumulator")) return r.status();
  return a;
}

// ---------------------------------------------------------------------------------------------
// SpectralMoments: options, counters, basis, the live epoch's sums (full matrices, in units of
// its scale), the buffered pairs, then the frozen previous epoch if any (its basis a prefix of
// the live one; since the nested epochs its sums may cover several epochs, scale 1 after a merge:
// same layout, so version 1 is unchanged and old files load as they are).

void SpectralMoments::Serialize(io::Writer& w) const {
  // Without landmarks the version-2 layout says everything (the basis is the source's first m
  // atoms), so such accumulators keep their bytes and state digests.
  const uint32_t version = landmarks_.rows() > 0 ? kSpectralVersion : 2;
  const size_t h = w.BeginObject(kSpectralTag, version);
  io::FieldWriter f(w);
  kSpectralOptionFields(f, options_, version);
  w.I64(samples_);
  w.I32(m_);
  w.Matrix(basis_);
  const auto write_epoch = [&](const Epoch& e) {
    kSpectralEpochFields(f, e);
    for (int fold = 0; fold < 2; ++fold) {
      w.Matrix(e.c00[fold]);
      w.Matrix(e.c01[fold]);
      w.Matrix(e.c11[fold]);
    }
  };
  write_epoch(live_);
  w.I32(buffered_);
  w.Matrix(xbuf_.topRows(buffered_));
  w.Matrix(ybuf_.topRows(buffered_));
  w.Bool(previous_.has_value());
  if (previous_) {
    w.I32(static_cast<int32_t>(previous_->basis.rows()));
    w.Matrix(previous_->basis);
    write_epoch(previous_->sums);
  }
  w.I64(drift_block_length_);
  w.I32(drift_blocks_);
  for (int b = 0; b < drift_blocks_; ++b) w.I64(drift_count_[b]);
  w.Matrix(drift_sum_.topRows(drift_blocks_));
  w.Matrix(drift_sq_.topRows(drift_blocks_));
  if (version >= 3) {
    w.I32(static_cast<int32_t>(landmarks_.rows()));
    w.Matrix(landmarks_);
    w.I32(considered_);
  }
  w.EndObject(h);
}

absl::StatusOr<SpectralMoments> SpectralMoments::Deserialize(io::Reader& r) {
  auto [version, o] =
      io::ReadObjectStart<Options>(r, kSpectralTag, kSpectralVersion, "SpectralMoments", kSpectralOptionFields);
  if (version < 2) {
    o.rebase_growth = 1;
    o.min_block_length = o.block_length;
  }
  if (!r.ValidOptions(o, "SpectralMoments")) return r.status();
  const int64_t samples = r.NonNegativeI64("spectral samples");
  const int m = r.I32In("spectral basis size", 0, o.max_basis);
  if (!r.ok()) return r.status();
  const int64_t p = m + 1;
  // Live epoch: 6 p^2 sums, scratch 2 B (p + d) + 3 B, the basis; the previous epoch is
  // bounded separately below once its size is known.
  if (!r.Reserve(Doubles(6 * p * p + 2 * int64_t{o.batch_size} * (p + o.dim) + 3 * int64_t{o.batch_size} +
                         int64_t{m} * (o.dim + 1)),
                 "SpectralMoments buffers")) {
    return r.status();
  }
  SpectralMoments acc(o);
  acc.samples_ = samples;
  acc.m_ = m;
  acc.basis_.resize(m, o.dim);
  r.MatrixInto("spectral basis", acc.basis_);
  if (!r.ok()) return r.status();
  acc.ComputeBasisSquaredNorms();
  io::FieldReader f(r);
  const auto read_epoch = [&](Epoch& e, int64_t size) {
    kSpectralEpochFields(f, e);
    if (!r.ok()) return;
    const int64_t q = e.epoch > 0 ? size : 0;
    for (int fold = 0; fold < 2; ++fold) {
      e.c00[fold].resize(q, q);
      e.c01[fold].resize(q, q);
      e.c11[fold].resize(q, q);
      r.MatrixInto("spectral C00", e.c00[fold]);
      r.MatrixInto("spectral C01", e.c01[fold]);
      r.MatrixInto("spectral C11", e.c11[fold]);
    }
  };
  read_epoch(acc.live_, p);
  if (!r.ok()) return r.status();
  if (acc.live_.samples > samples) return r.Fail("spectral: the live epoch has more samples than the stream");
  acc.live_block_ = acc.EpochBlockLength(samples - acc.live_.samples);
  if (acc.live_.epoch > 0) {
    acc.px_.resize(o.batch_size, p);
    acc.py_.resize(o.batch_size, p);
  }
  acc.buffered_ = r.I32In("spectral buffered", 0, o.batch_size - 1);
  if (r.ok() && acc.buffered_ > 0 && acc.live_.epoch == 0) (void)r.Fail("spectral: buffered pairs without an epoch");
  r.MatrixInto("spectral x buffer", acc.xbuf_.topRows(acc.buffered_));
  r.MatrixInto("spectral y buffer", acc.ybuf_.topRows(acc.buffered_));
  const bool has_previous = r.Bool("spectral has previous epoch");
  if (!r.ok()) return r.status();
  if (has_previous) {
    const int pm = r.I32In("spectral previous basis size", 0, o.max_basis);
    if (!r.ok()) return r.status();
    const int64_t pp = pm + 1;
    if (!r.Reserve(Doubles(6 * pp * pp + int64_t{pm} * o.dim), "SpectralMoments previous epoch")) return r.status();
    Frozen frozen;
    frozen.basis.resize(pm, o.dim);
    r.MatrixInto("spectral previous basis", frozen.basis);
    read_epoch(frozen.sums, pp);
    if (!r.ok()) return r.status();
    // The frozen sums are merged with the live ones' leading blocks (nested epochs): their basis
    // must be the live basis's first rows (always so when the basis follows the CME dictionary).
    if (pm > m || frozen.basis != acc.basis_.topRows(pm)) {
      (void)r.Fail("spectral: the previous epoch's basis is not a prefix of the live basis");
      return r.status();
    }
    acc.previous_ = std::move(frozen);
  }
  if (version >= 2) {
    acc.drift_block_length_ = r.I64("spectral drift block length");
    acc.drift_blocks_ = r.I32In("spectral drift blocks", 1, SpectralMoments::kDriftBlocks);
    if (!r.ok()) return r.status();
    if (acc.drift_block_length_ < SpectralMoments::kDriftFirstBlockLength) {
      return r.Fail("spectral: drift block length below the first block length");
    }
    for (int b = 0; b < acc.drift_blocks_; ++b) {
      acc.drift_count_[b] = r.NonNegativeI64("spectral drift block count");
      if (r.ok() && acc.drift_count_[b] > acc.drift_block_length_) return r.Fail("spectral: drift block overfull");
    }
    r.MatrixInto("spectral drift sums", acc.drift_sum_.topRows(acc.drift_blocks_));
    r.MatrixInto("spectral drift squares", acc.drift_sq_.topRows(acc.drift_blocks_));
    if (!r.ok()) return r.status();
  }
  if (version >= 3) {
    const int k = r.I32In("spectral landmarks", 0, o.max_basis);
    if (!r.ok()) return r.status();
    if (!r.Reserve(Doubles(int64_t{k} * o.dim), "SpectralMoments landmarks")) return r.status();
    acc.landmarks_.resize(k, o.dim);
    r.MatrixInto("spectral landmarks", acc.landmarks_);
    if (!r.ok()) return r.status();
    // They lead every basis (SetLandmarks): the live one's first rows, once an epoch began.
    if (acc.live_.epoch > 0 && (k > m || acc.landmarks_ != acc.basis_.topRows(k))) {
      return r.Fail("spectral: the landmarks are not the live basis's first rows");
    }
    acc.considered_ = r.I32In("spectral source atoms considered", std::max(0, m - k), 1 << 30);
    if (!r.ok()) return r.status();
  } else {
    acc.considered_ = m;  // no landmarks: the basis is the source's first m atoms
  }
  if (!r.EndObject("SpectralMoments")) return r.status();
  return acc;
}

}  // namespace cmestream
