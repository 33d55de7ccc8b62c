// EmbeddingMoments::Serialize / Deserialize, declared in core/embedding/state_embedding.h. Framing:
// core/io/binary_io.h; field lists: core/io/field_io.h (CONTRIBUTING.md "Binary formats").
// Object "EMOM": the options (what the constructor needs), the scalars, then the live blocks of
// the buffers. Capacity-sized buffers are written as their live blocks only: outside the live
// block they hold zeros both in a fresh object and in the running one (the learner only writes
// inside it), and the round-trip tests compare the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include "core/embedding/state_embedding.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("EMOM"), 1, "EmbeddingMoments"};

// EmbeddingMoments, after its feature map.
constexpr auto kMomentsOptionFields = [](auto& f, auto& o) {
  f.I32In("moments batch_size", o.batch_size, 1, 1 << 20);
  f.F64("moments forgetting", o.forgetting);
};

}  // namespace

void EmbeddingMoments::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  const bool rff = features_->kind() == FeatureMap::Kind::kRff;
  w.Bool(rff);
  w.I32(features_->input_dim());
  w.I32(features_->num_features());
  w.F64(features_->sigma());
  w.U64(features_->seed());
  // Two generated values, to detect a generator that differs from the writer's.
  w.F64(rff ? features_->omega()(0, 0) : 0.0);
  w.F64(rff ? features_->beta()(features_->num_features() - 1) : 0.0);
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
}

absl::StatusOr<EmbeddingMoments> EmbeddingMoments::Deserialize(io::Reader& r) {
  uint32_t version = 0;
  if (!r.BeginObject(kFormat.tag, kFormat.version, kFormat.name, &version)) return r.status();
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
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  const int64_t nn = n;
  const int64_t b = rff ? o.batch_size : 0;
  if (!r.Reserve(io::DoubleBytes(3 * nn * nn + b * (2 * int64_t{dim} + 2 * nn + 1) + (rff ? dim * nn + nn : 0)),
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
  if (!r.EndObject(kFormat.name)) return r.status();
  return m;
}

}  // namespace cmestream
