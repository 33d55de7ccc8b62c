#include "core/validation/lagged_moments.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("LAGM"), 1, "LaggedMoments"};

}  // namespace

void LagSums::Resize(int d) {
  c00 = MatrixXd::Zero(d, d);
  c0t = MatrixXd::Zero(d, d);
  s0 = VectorXd::Zero(d);
  n = 0;
}

void LagSums::Add(const LagSums& o) {
  c00 += o.c00;
  c0t += o.c0t;
  s0 += o.s0;
  n += o.n;
}

void LagSums::Subtract(const LagSums& o) {
  c00 -= o.c00;
  c0t -= o.c0t;
  s0 -= o.s0;
  n -= o.n;
}

absl::Status LaggedMoments::Options::Validate() const {
  if (lags.empty()) return absl::InvalidArgumentError("Violated constraint: lags is not empty");
  if (static_cast<int>(lags.size()) > kMaxLags) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: at most ", kMaxLags, " lags (got ", lags.size(), ")"));
  }
  for (size_t k = 0; k < lags.size(); ++k) {
    if (lags[k] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("Violated constraint: lag ", lags[k], " is positive"));
    }
    if (lags[k] > kMaxLag) {
      return absl::InvalidArgumentError(
          absl::StrCat("Violated constraint: lag ", lags[k], " is at most ", kMaxLag, " samples"));
    }
    if (k > 0 && lags[k] <= lags[k - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Violated constraint: lags are strictly increasing (", lags[k - 1], " then ", lags[k], ")"));
    }
  }
  if (dim < 1) return absl::InvalidArgumentError("Violated constraint: dim >= 1");
  if (max_blocks < 4 || max_blocks % 2 != 0) {
    return absl::InvalidArgumentError("Violated constraint: max_blocks is even and >= 4");
  }
  if (initial_block_length < 1) return absl::InvalidArgumentError("Violated constraint: initial_block_length >= 1");
  return absl::OkStatus();
}

LaggedMoments::LaggedMoments(const Options& options) : options_(options) {
  if (!options_.Validate().ok()) std::abort();
  const int L = static_cast<int>(options_.lags.size()), d = options_.dim;
  for (int k = 0; k < L; ++k)
    if (options_.lags[k] == 1) lag1_ = k;
  blocks_.assign(options_.max_blocks, std::vector<LagSums>(L));
  for (auto& b : blocks_)
    for (auto& s : b) s.Resize(d);
  block_samples_.assign(options_.max_blocks, 0);
  block_length_ = options_.initial_block_length;
  const int slots = options_.lags.back() + 1;
  if (options_.one_hot) {
    ring_ids_.assign(slots, 0);
  } else {
    ring_.setZero(slots, d);
  }
}

void LaggedMoments::StartEpisode() { episode_len_ = 0; }

const double* LaggedMoments::RingAt(int64_t back) const {
  const int64_t slots = ring_.rows();
  return ring_.row(((ring_head_ - 1 - back) % slots + slots) % slots).data();
}

void LaggedMoments::EndSample() {
  ++samples_;
  if (++block_samples_[num_blocks_ - 1] < block_length_) return;
  // The open block is full: close it, merging neighbours pairwise first if every slot is used.
  if (num_blocks_ == options_.max_blocks) {
    const int half = options_.max_blocks / 2;
    for (int b = 0; b < half; ++b) {
      std::vector<LagSums>& dst = blocks_[b];
      for (size_t k = 0; k < dst.size(); ++k) {
        if (b != 0) dst[k] = blocks_[size_t{2} * b][k];  // copy-assign into existing storage (same size)
        dst[k].Add(blocks_[size_t{2} * b + 1][k]);
      }
      block_samples_[b] = block_samples_[size_t{2} * b] + block_samples_[size_t{2} * b + 1];
    }
    for (int b = half; b < options_.max_blocks; ++b) {
      for (LagSums& s : blocks_[b]) {
        s.c00.setZero();
        s.c0t.setZero();
        s.s0.setZero();
        s.n = 0;
      }
      block_samples_[b] = 0;
    }
    num_blocks_ = half + 1;
    block_length_ *= 2;
    return;
  }
  ++num_blocks_;
}

void LaggedMoments::Observe(const double* psi) {
  const int d = options_.dim;
  const int64_t slots = ring_.rows();
  Eigen::Map<const VectorXd> y(psi, d);
  for (size_t k = 0; k < options_.lags.size(); ++k) {
    const int lag = options_.lags[k];
    if (lag > episode_len_) break;  // lags increase: no longer lag has a predecessor either
    Eigen::Map<const VectorXd> x(RingAt(lag - 1), d);
    LagSums& s = Open(static_cast<int>(k));
    s.c00.noalias() += x * x.transpose();
    s.c0t.noalias() += x * y.transpose();
    s.s0 += x;
    s.n += 1;
  }
  ring_.row(ring_head_) = y.transpose();
  ring_head_ = (ring_head_ + 1) % slots;
  ++episode_len_;
  ++trajectory_states_;
  EndSample();
}

void LaggedMoments::ObserveState(int id) {
  const int64_t slots = static_cast<int64_t>(ring_ids_.size());
  for (size_t k = 0; k < options_.lags.size(); ++k) {
    const int lag = options_.lags[k];
    if (lag > episode_len_) break;
    const int i = ring_ids_[((ring_head_ - lag) % slots + slots) % slots];
    LagSums& s = Open(static_cast<int>(k));
    s.c00(i, i) += 1;
    s.c0t(i, id) += 1;
    s.s0[i] += 1;
    s.n += 1;
  }
  ring_ids_[ring_head_] = id;
  ring_head_ = (ring_head_ + 1) % slots;
  ++episode_len_;
  ++trajectory_states_;
  EndSample();
}

void LaggedMoments::ObservePair(const double* psi_x, const double* psi_y) {
  if (lag1_ >= 0) {
    const int d = options_.dim;
    Eigen::Map<const VectorXd> x(psi_x, d), y(psi_y, d);
    LagSums& s = Open(lag1_);
    s.c00.noalias() += x * x.transpose();
    s.c0t.noalias() += x * y.transpose();
    s.s0 += x;
    s.n += 1;
  }
  ++unordered_pairs_;
  EndSample();
}

void LaggedMoments::ObservePairState(int i, int j) {
  if (lag1_ >= 0) {
    LagSums& s = Open(lag1_);
    s.c00(i, i) += 1;
    s.c0t(i, j) += 1;
    s.s0[i] += 1;
    s.n += 1;
  }
  ++unordered_pairs_;
  EndSample();
}

LaggedMomentsSnapshot LaggedMoments::Snapshot() const {
  LaggedMomentsSnapshot s;
  s.lags = options_.lags;
  s.dim = options_.dim;
  s.one_hot = options_.one_hot;
  const int L = static_cast<int>(options_.lags.size());
  s.total.resize(L);
  for (auto& t : s.total) t.Resize(options_.dim);
  for (int b = 0; b < num_blocks_; ++b) {
    if (block_samples_[b] == 0) continue;
    s.blocks.push_back(blocks_[b]);
    s.block_samples.push_back(block_samples_[b]);
    for (int k = 0; k < L; ++k) s.total[k].Add(blocks_[b][k]);
  }
  s.samples = samples_;
  s.trajectory_states = trajectory_states_;
  s.unordered_pairs = unordered_pairs_;
  return s;
}

namespace {

// After the lags (a count and the lags).
constexpr auto kLaggedOptionFields = [](auto& f, auto& o) {
  f.Count("lagged dim", o.dim, 1, 1 << 16);
  f.Bool("lagged one_hot", o.one_hot);
  f.Count("lagged max_blocks", o.max_blocks, 4, 1 << 10);
  f.I64("lagged initial_block_length", o.initial_block_length);
};

}  // namespace

// The counters; the blocks and the ring follow.
template <class Fields, class Self>
void LaggedMoments::StateFields(Fields& f, Self& m) {
  f.Scalars("lagged", io::Field("samples", m.samples_), io::Field("trajectory_states", m.trajectory_states_),
            io::Field("unordered_pairs", m.unordered_pairs_));
  f.Count("lagged num_blocks", m.num_blocks_, 1, m.options_.max_blocks);
  f.I64("lagged block_length", m.block_length_);
}

void LaggedMoments::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  const Options& o = options_;
  w.Ints(o.lags);
  kLaggedOptionFields(f, o);
  StateFields(f, *this);
  for (int b = 0; b < num_blocks_; ++b) {
    w.I64(block_samples_[b]);
    for (const LagSums& s : blocks_[b]) {
      w.Matrix(s.c00);
      w.Matrix(s.c0t);
      w.Matrix(s.s0);
      w.F64(s.n);
    }
  }
  w.I64(ring_head_);
  w.I64(episode_len_);
  if (o.one_hot) {
    for (int id : ring_ids_) w.I32(id);
  } else {
    w.Matrix(ring_);
  }
}

absl::StatusOr<LaggedMoments> LaggedMoments::Deserialize(io::Reader& r) {
  uint32_t version = 0;
  if (!r.BeginObject(kFormat.tag, kFormat.version, kFormat.name, &version)) return r.status();
  Options o;
  o.lags = r.Ints("lagged number of lags", "lagged lag", 1, kMaxLags);
  if (!r.ok()) return r.status();
  io::FieldReader f(r);
  kLaggedOptionFields(f, o);
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(absl::StrCat("LaggedMoments options: ", s.message()));
  const int64_t L = static_cast<int64_t>(o.lags.size()), d = o.dim;
  if (!r.Reserve(static_cast<uint64_t>(8 * (o.max_blocks * L * (2 * d * d + d + 1) + (o.lags.back() + 1) * d)),
                 "LaggedMoments buffers")) {
    return r.status();
  }
  LaggedMoments acc(o);
  StateFields(f, acc);
  if (!r.ok()) return r.status();
  if (acc.samples_ < 0 || acc.block_length_ < 1) return r.Fail("LaggedMoments: negative counters");
  for (int b = 0; b < acc.num_blocks_; ++b) {
    acc.block_samples_[b] = r.I64("lagged block samples");
    for (LagSums& s : acc.blocks_[b]) {
      r.MatrixInto("lagged c00", s.c00);
      r.MatrixInto("lagged c0t", s.c0t);
      r.MatrixInto("lagged s0", s.s0);
      s.n = r.F64("lagged n");
    }
    if (!r.ok()) return r.status();
  }
  acc.ring_head_ = r.I64("lagged ring head");
  acc.episode_len_ = r.I64("lagged episode length");
  const int64_t slots = o.lags.back() + 1;
  if (!r.ok()) return r.status();
  if (acc.ring_head_ < 0 || acc.ring_head_ >= slots || acc.episode_len_ < 0) {
    return r.Fail("LaggedMoments: ring position out of range");
  }
  if (o.one_hot) {
    for (int& id : acc.ring_ids_) {
      id = r.I32("lagged ring id");
      if (r.ok() && (id < 0 || id >= o.dim)) return r.Fail("LaggedMoments: ring id out of range");
    }
  } else {
    r.MatrixInto("lagged ring", acc.ring_);
  }
  if (!r.EndObject(kFormat.name)) return r.status();
  return acc;
}

}  // namespace cmestream
