// SpectralMoments::Serialize / Deserialize, declared in core/spectral/spectral_moments.h. Framing:
// core/io/binary_io.h; field lists: core/io/field_io.h (CONTRIBUTING.md "Binary formats").
// Object "SPMO": the options (what the constructor needs), the scalars, then the live blocks of
// the buffers. Capacity-sized buffers are written as their live blocks only: outside the live
// block they hold zeros both in a fresh object and in the running one (the learner only writes
// inside it), and the round-trip tests compare the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include "core/spectral/spectral_moments.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cme/compressed_cme.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

// Version 2 stores rebase_growth and min_block_length after the options; version 1 loads with the
// behaviour it was written with (rebase_growth 1: a re-base at every outgrowth; min_block_length =
// block_length: fixed blocks). Version 3 appends the landmarks (docs/algorithms.md §7.2) and is
// written only by an accumulator that has some; earlier versions load without any.
constexpr io::ObjectFormat kFormat = {io::Fourcc("SPMO"), 3, "SpectralMoments"};

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

}  // namespace

// SpectralMoments: options, counters, basis, the live epoch's sums (full matrices, in units of
// its scale), the buffered pairs, then the frozen previous epoch if any (its basis a prefix of
// the live one; since the nested epochs its sums may cover several epochs, scale 1 after a merge:
// same layout, so version 1 is unchanged and old files load as they are).

void SpectralMoments::Serialize(io::Writer& w) const {
  // Without landmarks the version-2 layout says everything (the basis is the source's first m
  // atoms), so such accumulators keep their bytes and state digests.
  const uint32_t version = landmarks_.rows() > 0 ? kFormat.version : 2;
  io::FieldWriter f(w, kFormat, version);
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
}

absl::StatusOr<SpectralMoments> SpectralMoments::Deserialize(io::Reader& r) {
  auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kSpectralOptionFields);
  if (version < 2) {
    o.rebase_growth = 1;
    o.min_block_length = o.block_length;
  }
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  const int64_t samples = r.NonNegativeI64("spectral samples");
  const int m = r.I32In("spectral basis size", 0, o.max_basis);
  if (!r.ok()) return r.status();
  const int64_t p = m + 1;
  // Live epoch: 6 p^2 sums, scratch 2 B (p + d) + 3 B, the basis; the previous epoch is
  // bounded separately below once its size is known.
  if (!r.Reserve(io::DoubleBytes(6 * p * p + 2 * int64_t{o.batch_size} * (p + o.dim) + 3 * int64_t{o.batch_size} +
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
    if (!r.Reserve(io::DoubleBytes(6 * pp * pp + int64_t{pm} * o.dim), "SpectralMoments previous epoch"))
      return r.status();
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
    if (!r.Reserve(io::DoubleBytes(int64_t{k} * o.dim), "SpectralMoments landmarks")) return r.status();
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
  if (!r.EndObject(kFormat.name)) return r.status();
  return acc;
}

}  // namespace cmestream
