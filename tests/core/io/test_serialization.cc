// Round trips and corruption of the learners' binary serialization (core/io/binary_io.h, and
// each estimator's *_io.cc beside it: core/cme/compressed_cme_io.cc and the like).
//
// The round-trip contract is bit-exact continuation: feed n1 samples, serialize, deserialize,
// feed n2 more samples into both the original and the copy; then the two serialize to the
// same bytes (every double bit-identical). n1 is chosen so that partial batch buffers,
// pending triples, a used reservoir RNG and a pending forgetting rescale are all in flight.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "absl/strings/escaping.h"
#include "core/cme/compressed_cme.h"
#include "core/common/splitmix.h"
#include "core/counts/transition_counts.h"
#include "core/embedding/state_embedding.h"
#include "core/io/binary_io.h"
#include "core/kernels/gaussian.h"
#include "core/latent/latent_model.h"
#include "core/predictive/predictive_state.h"
#include "core/spectral/spectral_moments.h"
#include "gtest/gtest.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

#include "tests/core/latent_v1_fixture.inc"

// A noisy nonlinear 2-D map: x' = 0.9 [sin(x1) + 0.5 x2, cos(x0)] + 0.1 noise.
RowMatrixXd Trajectory(int n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.1);
  RowMatrixXd x(n + 1, d);
  for (int a = 0; a < d; ++a) x(0, a) = noise(rng);
  for (int t = 0; t < n; ++t) {
    for (int a = 0; a < d; ++a) {
      x(t + 1, a) = 0.9 * (a % 2 == 0 ? std::sin(x(t, (a + 1) % d)) + 0.5 * x(t, a) : std::cos(x(t, 0))) + noise(rng);
    }
  }
  return x;
}

using test_support::Bytes;

template <typename T>
T RoundTrip(const T& object) {
  const std::string bytes = Bytes(object);
  io::Reader r(bytes, "test");
  absl::StatusOr<T> copy = T::Deserialize(r);
  EXPECT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(r.remaining(), 0u);
  return *std::move(copy);
}

// ---------------------------------------------------------------------------------------------
// Writer/Reader primitives.

TEST(BinaryIo, LittleEndianFixedWidthAndBitExactDoubles) {
  io::Writer w;
  w.U32(0x01020304u);
  w.U64(0x0102030405060708ull);
  w.F64(-0.0);
  w.F64(std::nextafter(1.0, 2.0));
  w.F64(std::numeric_limits<double>::quiet_NaN());
  const std::string& b = w.data();
  ASSERT_EQ(b.size(), 4u + 8u + 24u);
  EXPECT_EQ(static_cast<uint8_t>(b[0]), 0x04);  // least significant byte first
  EXPECT_EQ(static_cast<uint8_t>(b[3]), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(b[4]), 0x08);
  io::Reader r(b, "prim");
  EXPECT_EQ(r.U32("a"), 0x01020304u);
  EXPECT_EQ(r.U64("b"), 0x0102030405060708ull);
  const double z = r.F64("c");
  EXPECT_TRUE(std::signbit(z));
  EXPECT_EQ(r.F64("d"), std::nextafter(1.0, 2.0));
  EXPECT_TRUE(std::isnan(r.F64("e")));
  EXPECT_TRUE(r.ok());
  r.U8("past the end");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("prim: offset 36: truncated: reading past the end"), std::string::npos)
      << r.status();
}

TEST(BinaryIo, HugeLengthPrefixIsRejectedBeforeAllocating) {
  io::Writer w;
  w.U64(uint64_t{1} << 62);  // a string "length" of 4 EiB
  io::Reader r(w.data(), "huge");
  EXPECT_TRUE(r.String("name", 1 << 20).empty());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("name is 4611686018427387904, expected 0..1048576"), std::string::npos)
      << r.status();
}

// ---------------------------------------------------------------------------------------------
// CompressedCme

CompressedCme::Options CmeOptions(bool averaging, int max_dict) {
  CompressedCme::Options o;
  o.dim = 2;
  o.sigma = 0.5;
  o.eta = 0.2;
  o.epsilon = max_dict < 100 ? 1e-6 : 1e-2;  // small caps: a tiny budget forces projections
  o.max_dict = max_dict;
  o.averaging = averaging;
  o.step_decay_samples = averaging ? 100 : 0;
  return o;
}

void Feed(CompressedCme& cme, const RowMatrixXd& x, int from, int to) {
  for (int t = from; t < to; ++t) cme.Observe(x.row(t).data(), x.row(t + 1).data());
}

class CmeRoundTrip : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(CmeRoundTrip, ContinuesBitIdentically) {
  const auto [averaging, max_dict] = GetParam();
  const int n1 = 777, n2 = 600;
  const RowMatrixXd x = Trajectory(n1 + n2, 2, 3);
  CompressedCme a(CmeOptions(averaging, max_dict));
  Feed(a, x, 0, n1);
  ASSERT_GT(a.dict_x_size(), 5);
  if (max_dict < 100) {
    ASSERT_GT(a.counters().forced, 0) << "the cap must be reached to test forced steps";
  }
  CompressedCme b = RoundTrip(a);
  EXPECT_EQ(Bytes(a), Bytes(b));
  EXPECT_EQ(b.samples(), n1);
  Feed(a, x, n1, n1 + n2);
  Feed(b, x, n1, n1 + n2);
  EXPECT_EQ(a.samples(), n1 + n2);
  EXPECT_EQ(Bytes(a), Bytes(b));
  EXPECT_EQ((a.W() - b.W()).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(a.counters().forced, b.counters().forced);
}

INSTANTIATE_TEST_SUITE_P(Variants, CmeRoundTrip,
                         ::testing::Values(std::make_tuple(false, 1000), std::make_tuple(true, 1000),
                                           std::make_tuple(false, 12)));

// The batched path continues bit-identically after a load too (snapshots are taken between
// batches; the learner's capacity, which sets the buffers' strides, follows the same rule).
TEST(CmeSerialization, BatchedContinuesBitIdentically) {
  const RowMatrixXd x = Trajectory(1400, 2, 5);
  CompressedCme a(CmeOptions(true, 1000));
  for (int t = 0; t < 700; t += 100) a.ObserveBatch(x.middleRows(t, 100), x.middleRows(t + 1, 100));
  CompressedCme b = RoundTrip(a);
  for (int t = 700; t < 1300; t += 150) {
    a.ObserveBatch(x.middleRows(t, 150), x.middleRows(t + 1, 150));
    b.ObserveBatch(x.middleRows(t, 150), x.middleRows(t + 1, 150));
  }
  EXPECT_EQ(a.samples(), 1300);
  EXPECT_EQ(Bytes(a), Bytes(b));
}

// Re-factorization after a load must match one without the load (same inverses in, same out).
TEST(CmeSerialization, RefactorizeAfterLoadMatches) {
  const RowMatrixXd x = Trajectory(500, 2, 4);
  CompressedCme a(CmeOptions(false, 1000));
  Feed(a, x, 0, 400);
  CompressedCme b = RoundTrip(a);
  a.Refactorize();
  b.Refactorize();
  Feed(a, x, 400, 500);
  Feed(b, x, 400, 500);
  EXPECT_EQ(Bytes(a), Bytes(b));
}

// Version 1 (written before the factored representation) stored W and the Gram inverses. A
// version-1 object is written here field by field from a running learner; loading it factorizes
// the Grams, and the loaded learner has the same W and goes on learning like the original.
std::string CmeVersion1Bytes(const CompressedCme& a) {
  io::Writer w;
  const size_t h = w.BeginObject(io::Fourcc("CCME"), 1);
  const CompressedCme::Options& o = a.options();
  w.I32(o.dim);
  w.F64(o.sigma);
  w.F64(o.eta);
  w.F64(o.lambda);
  w.F64(o.epsilon);
  w.I32(o.max_dict);
  w.Bool(o.one_sided);
  w.F64(o.jitter);
  w.F64(o.drift_tolerance);
  w.I64(o.drift_check_interval);
  w.F64(o.step_decay_samples);
  w.F64(o.step_decay_power);
  w.Bool(o.averaging);
  const CompressedCme::Counters& c = a.counters();
  w.I64(c.samples);
  w.I64(c.compressed);
  w.I64(c.admitted_x);
  w.I64(c.admitted_y);
  w.I64(c.forced);
  w.F64(c.forced_error_sum);
  w.I64(c.refactorizations);
  w.I32(a.dict_x_size());
  w.I32(a.dict_y_size());
  w.F64(a.last_drift());
  w.I32(a.last_nearest_x());
  w.I32(a.last_nearest_y_in_x());
  w.U8(static_cast<uint8_t>(a.last_step()));
  w.F64(a.last_error());
  w.I64(a.negative_delta_events());
  w.I64(0);  // samples since the last drift check
  w.Matrix(a.x_atoms());
  w.Matrix(a.y_atoms());
  w.Matrix(a.W_iterate());
  if (o.averaging) w.Matrix(a.W());
  w.Matrix(GaussianGram(a.x_atoms(), a.x_atoms(), o.sigma));
  w.Matrix(GaussianGram(a.y_atoms(), a.y_atoms(), o.sigma));
  w.Matrix(a.gram_x_inverse());
  w.Matrix(a.gram_y_inverse());
  w.EndObject(h);
  return w.Release();
}

TEST(CmeSerialization, Version1LoadsByFactorizingTheGrams) {
  for (const bool averaging : {false, true}) {
    const RowMatrixXd x = Trajectory(1200, 2, 6);
    CompressedCme a(CmeOptions(averaging, 1000));
    Feed(a, x, 0, 700);
    ASSERT_GT(a.dict_x_size(), 10);
    const std::string v1 = CmeVersion1Bytes(a);
    io::Reader r(v1, "v1");
    absl::StatusOr<CompressedCme> b = CompressedCme::Deserialize(r);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->counters().refactorizations, a.counters().refactorizations);
    auto rel = [](const MatrixXd& p, const MatrixXd& q) { return (p - q).norm() / q.norm(); };
    EXPECT_LT(rel(b->W(), a.W()), 1e-9);
    EXPECT_LT(rel(b->W_iterate(), a.W_iterate()), 1e-9);
    EXPECT_LT(rel(b->gram_x_inverse(), a.gram_x_inverse()), 1e-6);
    Feed(a, x, 700, 1200);
    Feed(*b, x, 700, 1200);
    EXPECT_EQ(b->dict_x_size(), a.dict_x_size());
    EXPECT_EQ(b->dict_y_size(), a.dict_y_size());
    EXPECT_LT(rel(b->W(), a.W()), 1e-8) << "averaging " << averaging;
    // And it is written back as the current version.
    EXPECT_EQ(Bytes(*b).substr(4, 1), std::string(1, '\x02'));
  }
}

// The periodic check's probe estimate of the factors' drift agrees with the exact measure.
TEST(CmeSerialization, DriftEstimateTracksTheExactMeasure) {
  const RowMatrixXd x = Trajectory(2000, 2, 8);
  CompressedCme::Options o = CmeOptions(false, 1000);
  o.epsilon = 1e-4;
  o.drift_check_interval = 0;  // let rounding accumulate: no repairs
  CompressedCme a(o);
  Feed(a, x, 0, 2000);
  ASSERT_GT(a.dict_x_size(), 40);
  const double exact = a.MeasureInverseDrift();
  const double estimate = a.EstimateInverseDrift();
  std::printf("m_x = %d: drift exact %.3g, estimated %.3g\n", a.dict_x_size(), exact, estimate);
  ASSERT_GT(exact, 0);
  EXPECT_GT(estimate, exact / 3);
  EXPECT_LT(estimate, exact * 3);
}

// ---------------------------------------------------------------------------------------------
// TransitionCounts, with forgetting fast enough to cross several lazy rescales (w > 1e100
// every ~332 samples at gamma = 0.5).

TEST(CountsSerialization, ContinuesBitIdenticallyAcrossRescales) {
  TransitionCounts::Options o;
  o.max_states = 50;
  o.forgetting = 0.5;
  TransitionCounts a(o);
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> id(0, 29);
  for (int t = 0; t < 1000; ++t) a.Add(id(rng), id(rng));
  TransitionCounts b = RoundTrip(a);
  EXPECT_EQ(Bytes(a), Bytes(b));
  for (int t = 0; t < 700; ++t) {
    const int i = id(rng), j = id(rng);
    a.Add(i, j);
    b.Add(i, j);
  }
  EXPECT_EQ(Bytes(a), Bytes(b));
  EXPECT_EQ(a.total_weight(), b.total_weight());
  // Closed form: with gamma = 1/2 the total weight is sum_{s<T} 2^-s = 2 - 2^(1-T) -> 2.
  EXPECT_NEAR(b.total_weight(), 2.0, 1e-12);
}

// ---------------------------------------------------------------------------------------------
// EmbeddingMoments: RFF with a partially filled batch buffer and forgetting; one-hot.

TEST(MomentsSerialization, RffContinuesBitIdenticallyWithPartialBuffer) {
  absl::StatusOr<FeatureMap> f = FeatureMap::Rff(2, 64, 0.7, 9);
  ASSERT_TRUE(f.ok());
  EmbeddingMoments::Options o;
  o.batch_size = 64;
  o.forgetting = 0.999;
  EmbeddingMoments a(std::make_shared<const FeatureMap>(*f), o);
  const RowMatrixXd x = Trajectory(1000, 2, 6);
  for (int t = 0; t < 301; ++t) a.Observe(x.row(t).data(), x.row(t + 1).data());
  ASSERT_EQ(a.buffered(), 301 % 64);
  EmbeddingMoments b = RoundTrip(a);
  EXPECT_EQ(b.buffered(), 301 % 64);
  for (int t = 301; t < 1000; ++t) {
    a.Observe(x.row(t).data(), x.row(t + 1).data());
    b.Observe(x.row(t).data(), x.row(t + 1).data());
  }
  EXPECT_EQ(Bytes(a), Bytes(b));
  const EmbeddingMomentsSnapshot sa = a.Snapshot(), sb = b.Snapshot();
  EXPECT_EQ((sa.Ph - sb.Ph).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(sa.n, sb.n);
}

TEST(MomentsSerialization, OneHotRoundTrip) {
  absl::StatusOr<FeatureMap> f = FeatureMap::OneHot(5);
  ASSERT_TRUE(f.ok());
  EmbeddingMoments a(std::make_shared<const FeatureMap>(*f), {});
  for (int t = 0; t < 40; ++t) {
    const double i = t % 5, j = (t * 3) % 5;
    a.Observe(&i, &j);
  }
  EmbeddingMoments b = RoundTrip(a);
  EXPECT_EQ(Bytes(a), Bytes(b));
  EXPECT_EQ(b.Snapshot().Ph(0, 0), 8.0);  // t = 0, 5, ..., 35: (0, 0) eight times
}

// ---------------------------------------------------------------------------------------------
// MultiViewAccumulator: the reservoir (size 50 < triples) makes every later triple draw from
// the RNG, so a wrong RNG state changes which rows are replaced.

TEST(LatentSerialization, ContinuesBitIdenticallyWithReservoirRngAndPendingTriples) {
  MultiViewAccumulator::Options o;
  o.features.dim = 2;
  o.features.num_features = 40;
  o.features.sigma = 0.8;
  o.reservoir_size = 50;
  o.batch = 16;
  MultiViewAccumulator a(o);
  const RowMatrixXd x = Trajectory(900, 2, 7);
  for (int t = 0; t < 405; ++t) ASSERT_TRUE(a.Observe(x.row(t).data()).ok());
  MultiViewAccumulator b = RoundTrip(a);
  EXPECT_EQ(Bytes(a), Bytes(b));
  for (int t = 405; t < 900; ++t) {
    if (t == 600) {
      a.StartEpisode();
      b.StartEpisode();
    }
    ASSERT_TRUE(a.Observe(x.row(t).data()).ok());
    ASSERT_TRUE(b.Observe(x.row(t).data()).ok());
  }
  EXPECT_EQ(a.triples(), 403 + 600 - 405 + 300 - 2);
  EXPECT_EQ(Bytes(a), Bytes(b));
  const auto sa = a.Snapshot(), sb = b.Snapshot();
  EXPECT_EQ((sa.reservoir - sb.reservoir).cwiseAbs().maxCoeff(), 0.0);

  // The uninterrupted run (never serialized) ends in the same bytes as the restored one.
  MultiViewAccumulator c(o);
  for (int t = 0; t < 900; ++t) {
    if (t == 600) c.StartEpisode();
    ASSERT_TRUE(c.Observe(x.row(t).data()).ok());
  }
  EXPECT_EQ(Bytes(a), Bytes(c));
}

// Version 1 of MVAC (written before the latent model used the library's FeatureMap) stored only
// the seed of features drawn by an algorithm of its own. The fixtures were written by that code
// (latent_v1_fixture.inc: how); loaded here they must give the densities that code computed, at
// load and after the same further observations, and be written back as version 2 with their
// features stored. d = 1 and one-hot: bit for bit; d = 2: to rounding (the new map sums
// Omega^T x before adding beta; the measured difference is in the comment below).
RowMatrixXd LatentFixtureSequence(int n, int d, bool discrete) {
  internal::SplitMix rng(2024);
  RowMatrixXd x(n, d);
  int s = 0;
  for (int t = 0; t < n; ++t) {
    if (rng.Uniform() < 0.1) s = 1 - s;
    if (discrete) {
      const double u = rng.Uniform();
      x(t, 0) = s == 0 ? (u < 0.7 ? 0 : (u < 0.9 ? 1 : 2)) : (u < 0.1 ? 0 : (u < 0.3 ? 1 : 2));
      continue;
    }
    for (int j = 0; j < d; ++j) x(t, j) = (s == 0 ? -1.5 : 1.5) * (j == 0 ? 1.0 : 0.3) + 0.4 * rng.Normal();
  }
  return x;
}

MatrixXd FixtureDensities(const MultiViewAccumulator& acc, int d, bool discrete) {
  RowMatrixXd pts(5, d);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < d; ++j) pts(i, j) = discrete ? (i % 3) : -2.0 + i * 1.0 + 0.25 * j;
  LatentModel::FitOptions fo;
  fo.k = 2;
  absl::StatusOr<LatentModel> m = LatentModel::Fit(acc.Snapshot(), fo);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m->Density(pts) : MatrixXd();
}

TEST(LatentSerialization, Version1ObjectsKeepTheirFeaturesAndDensities) {
  struct Case {
    const char* name;
    const char* base64;
    const double* at_load;
    const double* after_more;
    int d;
    bool discrete;
    double tolerance;  // relative to the largest density
  };
  // The recorded densities come from one build (x86-64-v2, scalar cos); the features' cosines
  // (libmvec's vector cos, < 4 ulp) and FMA contraction (x86-64-v3) change their last bits, so
  // every case compares to 1e-14 relative (measured: 6e-16 absolute with x86-64-v3).
  const Case cases[] = {
      {"RFF d=1", kRff1V1, kRff1DensityAtLoad, kRff1DensityAfterMore, 1, false, 1e-14},
      {"RFF d=2", kRff2V1, kRff2DensityAtLoad, kRff2DensityAfterMore, 2, false, 1e-14},
      {"one-hot", kOneHotV1, kOneHotDensityAtLoad, kOneHotDensityAfterMore, 1, true, 1e-14},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string v1;
    ASSERT_TRUE(absl::Base64Unescape(c.base64, &v1));
    ASSERT_EQ(v1[4], 1);  // the object's version
    io::Reader r(v1, "v1 fixture");
    absl::StatusOr<MultiViewAccumulator> acc = MultiViewAccumulator::Deserialize(r);
    ASSERT_TRUE(acc.ok()) << acc.status();
    const auto same = [&](const MatrixXd& got, const double* want) {
      ASSERT_EQ(got.size(), 10);
      const Eigen::Map<const MatrixXd> w(want, 5, 2);
      const double scale = w.cwiseAbs().maxCoeff();
      EXPECT_LE((got - w).cwiseAbs().maxCoeff(), c.tolerance * scale) << got << "\nwant\n" << w;
    };
    same(FixtureDensities(*acc, c.d, c.discrete), c.at_load);
    // Written back as version 2 (with Omega and beta): the same state, bit for bit.
    const std::string v2 = Bytes(*acc);
    EXPECT_EQ(v2[4], 2);
    MultiViewAccumulator again = RoundTrip(*acc);
    EXPECT_EQ(Bytes(again), v2);
    if (!c.discrete) {
      EXPECT_EQ(again.features().omega(), acc->features().omega());
      // The bug version 2 fixes: a fresh accumulator draws the library's features, not these.
      MultiViewAccumulator fresh(acc->options());
      EXPECT_NE(fresh.features().omega(), acc->features().omega());
      EXPECT_EQ(fresh.features().omega(), FeatureMap::Rff(c.d, 8, 0.8, 5)->omega());
    }
    // Continues as the version-1 code did.
    const RowMatrixXd x = LatentFixtureSequence(400, c.d, c.discrete);
    ASSERT_TRUE(acc->ObserveBatch(x.bottomRows(101)).ok());
    ASSERT_TRUE(again.ObserveBatch(x.bottomRows(101)).ok());
    same(FixtureDensities(*acc, c.d, c.discrete), c.after_more);
    EXPECT_EQ(Bytes(again), Bytes(*acc));
  }
}

// The double stored at `offset` of an encoded object, and the status of decoding the object
// with that double replaced by `value`.
double DoubleAt(const std::string& bytes, size_t offset) {
  double v = 0;
  std::memcpy(&v, &bytes[offset], 8);
  return v;
}
absl::Status DecodeLatentWithDouble(std::string bytes, size_t offset, double value) {
  std::memcpy(&bytes[offset], &value, 8);
  io::Reader r(bytes, "f");
  return MultiViewAccumulator::Deserialize(r).status();
}
constexpr char kNonFiniteMap[] = "latent feature map: Violated constraint: omega and beta finite";

// A version-1 object whose sigma makes the old draw infinite (found by fuzz_snapshot: a
// denormal sigma, 1/sigma = inf) is DataLoss, not an abort. Body: 16-byte header, kind (1),
// dim (4), num_features (4), then sigma at offset 25.
TEST(LatentSerialization, Version1WithANonFiniteDrawIsDataLoss) {
  std::string v1;
  ASSERT_TRUE(absl::Base64Unescape(kRff2V1, &v1));
  ASSERT_EQ(DoubleAt(v1, 25), 0.8);
  const absl::Status st = DecodeLatentWithDouble(v1, 25, 2.2250738585072034e-309);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(kNonFiniteMap), std::string::npos) << st;
}

// Version 2's stored map: a future version is named, a non-finite Omega or a truncated one is
// DataLoss naming the field.
TEST(LatentSerialization, Version2MapCorruptionIsRefused) {
  MultiViewAccumulator::Options o;
  o.features.dim = 2;
  o.features.num_features = 4;
  o.reservoir_size = 10;
  o.batch = 4;
  MultiViewAccumulator a(o);
  const RowMatrixXd x = Trajectory(20, 2, 3);
  ASSERT_TRUE(a.ObserveBatch(x).ok());
  const std::string bytes = Bytes(a);
  {
    std::string bad = bytes;
    bad[4] = 3;
    io::Reader r(bad, "f");
    EXPECT_EQ(MultiViewAccumulator::Deserialize(r).status().message(),
              "f: offset 0: MultiViewAccumulator (MVAC) version 3 is not supported by this build (reads 1..2)");
  }
  // Body: 16-byte object header, the options (45 bytes), then Omega (u64 rows, u64 cols, 2 x 4
  // doubles column-major): its first entry at offset 77.
  ASSERT_EQ(DoubleAt(bytes, 77), a.features().omega()(0, 0));
  absl::Status st = DecodeLatentWithDouble(bytes, 77, std::nan(""));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(kNonFiniteMap), std::string::npos) << st;
  io::Reader r(std::string_view(bytes).substr(0, 90), "f");
  st = MultiViewAccumulator::Deserialize(r).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st;
}

// ---------------------------------------------------------------------------------------------
// PredictiveStateAccumulator

TEST(PredictiveSerialization, DiscreteAndLinearGaussianContinueBitIdentically) {
  {
    PredictiveStateAccumulator::Options o;
    o.kind = PredictiveStateAccumulator::Kind::kDiscrete;
    o.num_symbols = 3;
    o.history_length = 2;
    PredictiveStateAccumulator a(o);
    std::mt19937_64 rng(8);
    std::uniform_int_distribution<int> s(0, 2);
    for (int t = 0; t < 101; ++t) {
      const double v = s(rng);
      ASSERT_TRUE(a.Observe(&v).ok());
    }
    PredictiveStateAccumulator b = RoundTrip(a);
    for (int t = 0; t < 50; ++t) {
      const double v = s(rng);
      ASSERT_TRUE(a.Observe(&v).ok());
      ASSERT_TRUE(b.Observe(&v).ok());
    }
    EXPECT_EQ(b.windows(), 151 - 3);  // one window per observation from the 4th (H + 2 = 4) on
    EXPECT_EQ(Bytes(a), Bytes(b));
  }
  {
    PredictiveStateAccumulator::Options o;
    o.kind = PredictiveStateAccumulator::Kind::kLinearGaussian;
    o.dim = 2;
    o.history_length = 2;
    o.future_length = 2;
    PredictiveStateAccumulator a(o);
    const RowMatrixXd x = Trajectory(300, 2, 9);
    for (int t = 0; t < 123; ++t) ASSERT_TRUE(a.Observe(x.row(t).data()).ok());
    PredictiveStateAccumulator b = RoundTrip(a);
    for (int t = 123; t < 300; ++t) {
      ASSERT_TRUE(a.Observe(x.row(t).data()).ok());
      ASSERT_TRUE(b.Observe(x.row(t).data()).ok());
    }
    EXPECT_EQ(Bytes(a), Bytes(b));
  }
}

TEST(PredictiveSerialization, SizesTheBodyCannotHoldAreRefusedBeforeAllocating) {
  PredictiveStateAccumulator::Options o;
  o.kind = PredictiveStateAccumulator::Kind::kLinearGaussian;
  o.dim = 2;
  o.history_length = 2;
  o.future_length = 2;
  std::string bad = Bytes(PredictiveStateAccumulator(o));
  // Body: 16-byte object header, kind (1), num_symbols (4), dim (4) at offset 21. dim 2 -> 300
  // claims about 1.6e6 doubles (13 MB) that the short body does not hold.
  const int32_t dim = 300;
  std::memcpy(&bad[21], &dim, 4);
  io::Reader r(bad, "f");
  absl::StatusOr<PredictiveStateAccumulator> a = PredictiveStateAccumulator::Deserialize(r);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("truncated: reading PredictiveStateAccumulator statistics needs"),
            std::string::npos)
      << a.status();
}

// ---------------------------------------------------------------------------------------------
// Corruption: truncation at every length, bad tag, future version, inconsistent dimensions.

std::string SmallCmeBytes() {
  CompressedCme a(CmeOptions(false, 30));
  const RowMatrixXd x = Trajectory(200, 2, 10);
  Feed(a, x, 0, 200);
  return Bytes(a);
}

TEST(SerializationCorruption, EveryTruncationIsDataLossNamingTheSource) {
  const std::string bytes = SmallCmeBytes();
  for (size_t n = 0; n < bytes.size(); n += (n < 200 ? 1 : 97)) {
    io::Reader r(std::string_view(bytes).substr(0, n), "cme.snap");
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok()) << "length " << n;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(c.status().message().rfind("cme.snap: offset ", 0), 0u) << c.status();
    EXPECT_NE(c.status().message().find("truncated"), std::string::npos) << c.status();
  }
}

TEST(SerializationCorruption, BadTagAndFutureVersionAreNamed) {
  std::string bytes = SmallCmeBytes();
  {
    std::string bad = bytes;
    bad[0] = 'X';
    io::Reader r(bad, "f");
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().message(), "f: offset 0: expected CompressedCme (tag CCME), found tag XCME");
  }
  {
    std::string bad = bytes;
    bad[4] = 3;  // version 3
    io::Reader r(bad, "f");
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().message(),
              "f: offset 0: CompressedCme (CCME) version 3 is not supported by this build (reads 1..2)");
  }
  {
    // A counts object where a CME is expected.
    TransitionCounts t({});
    const std::string counts = Bytes(t);
    io::Reader r(counts, "f");
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("found tag CNTS"), std::string::npos) << c.status();
  }
}

TEST(SerializationCorruption, DimensionsBeyondTheHeaderAreRejectedBeforeAllocating) {
  std::string bytes = SmallCmeBytes();
  // Body layout: 16-byte object header, then dim (4), sigma, eta, lambda, epsilon (32),
  // max_dict (4) at offset 52.
  {
    // max_dict 30 -> 20000 and m_x -> 20000 (6 * 20000^2 doubles = 19.2 GB of buffers, which
    // follow the dictionary size) with a budget of 1 MiB: refused before anything is allocated.
    // (A large max_dict alone costs nothing: capacity grows with the dictionary.)
    std::string bad = bytes;
    const int32_t huge = 20000;
    std::memcpy(&bad[52], &huge, 4);   // little-endian host
    std::memcpy(&bad[154], &huge, 4);  // m_x, see the offset below
    io::Reader r(bad, "f");
    r.set_allocation_budget(1 << 20);
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok());
    // The body cannot hold a 20000-atom dictionary: refused on the bytes left, whatever the
    // budget (a short hostile body must not cost its claimed allocation).
    EXPECT_NE(c.status().message().find("truncated: reading CompressedCme atoms and matrices needs"), std::string::npos)
        << c.status();
  }
  {
    // A well-formed body whose buffers exceed the caller's budget: refused by the budget.
    io::Reader r(bytes, "f");
    r.set_allocation_budget(1 << 10);
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("CompressedCme buffers would allocate"), std::string::npos) << c.status();
  }
  {
    // m_x larger than max_dict (30). Offset of m_x: 16 + 4 + 32 + 4 + 1 + 40 + 1 + 56 = 154.
    std::string bad = bytes;
    const int32_t mx = 31;
    std::memcpy(&bad[154], &mx, 4);
    io::Reader r(bad, "f");
    absl::StatusOr<CompressedCme> c = CompressedCme::Deserialize(r);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("cme dictionary size m_x is 31 (field at offset 154), expected 0..30"),
              std::string::npos)
        << c.status();
  }
}

// SpectralMoments: a stream fed as the service feeds it (CME atoms -> epochs), stopped in the
// middle of a batch, with forgetting, a frozen previous epoch and pairs in the buffer.
struct SpectralPair {
  CompressedCme cme;
  SpectralMoments acc;
};

SpectralMoments::Options SpectralOptions(double forgetting) {
  SpectralMoments::Options o;
  o.dim = 2;
  o.sigma = 0.5;
  o.max_basis = 1000;
  o.batch_size = 16;
  o.block_length = 50;
  o.forgetting = forgetting;
  o.min_epoch_samples = 100;
  return o;
}

void FeedSpectral(CompressedCme& cme, SpectralMoments& acc, const RowMatrixXd& x, int from, int to) {
  for (int t = from; t < to; ++t) {
    cme.Observe(x.row(t).data(), x.row(t + 1).data());
    if (acc.ShouldStartEpoch(cme.dict_x_size())) acc.StartEpoch(cme.x_atoms());
    acc.Observe(x.row(t).data(), x.row(t + 1).data());
  }
}

class SpectralRoundTrip : public ::testing::TestWithParam<double> {};

TEST_P(SpectralRoundTrip, ContinuesBitIdentically) {
  const int n1 = 1003, n2 = 700;
  const RowMatrixXd x = Trajectory(n1 + n2, 2, 12);
  CompressedCme cme(CmeOptions(false, 1000));
  SpectralMoments a(SpectralOptions(GetParam()));
  {
    // Before any epoch: an empty accumulator round-trips too.
    SpectralMoments empty = RoundTrip(a);
    EXPECT_EQ(Bytes(empty), Bytes(a));
  }
  FeedSpectral(cme, a, x, 0, n1);
  ASSERT_GT(a.epoch(), 1);
  ASSERT_TRUE(a.has_previous());
  ASSERT_GT(a.buffered(), 0);
  SpectralMoments b = RoundTrip(a);
  EXPECT_EQ(Bytes(a), Bytes(b));
  CompressedCme cme_b = cme;
  FeedSpectral(cme, a, x, n1, n1 + n2);
  FeedSpectral(cme_b, b, x, n1, n1 + n2);
  EXPECT_EQ(Bytes(a), Bytes(b));
  const SpectralMomentsSnapshot sa = a.Snapshot(), sb = b.Snapshot();
  EXPECT_EQ(sa.moments.epoch, sb.moments.epoch);
  for (int f = 0; f < 2; ++f) {
    EXPECT_EQ((sa.moments.c01[f] - sb.moments.c01[f]).cwiseAbs().maxCoeff(), 0.0);
    EXPECT_EQ(sa.moments.n[f], sb.moments.n[f]);
  }
}

INSTANTIATE_TEST_SUITE_P(Forgetting, SpectralRoundTrip, ::testing::Values(1.0, 0.999));

// Landmarks lead every basis (docs/algorithms.md §7.2), across re-bases and a restart; a file
// whose landmarks are not the live basis's first rows is refused.
TEST(SpectralRoundTrip, LandmarksLeadEveryBasisAndContinueBitIdentically) {
  const int n1 = 1003, n2 = 700;
  const RowMatrixXd x = Trajectory(n1 + n2 + 1, 2, 14);
  CompressedCme cme(CmeOptions(false, 1000));
  SpectralMoments a(SpectralOptions(1.0));
  const RowMatrixXd landmarks = x.middleRows(100, 5);
  a.SetLandmarks(landmarks);
  EXPECT_EQ(Bytes(RoundTrip(a)), Bytes(a));  // before any epoch
  FeedSpectral(cme, a, x, 0, n1);
  ASSERT_GT(a.epoch(), 1);
  ASSERT_TRUE(a.has_previous());
  EXPECT_EQ(a.landmarks(), 5);
  const SpectralMomentsSnapshot snap = a.Snapshot();
  ASSERT_GT(snap.basis.rows(), 5);
  EXPECT_TRUE(snap.basis.topRows(5) == landmarks);
  // Then the dictionary's atoms, without those within 0.045 sigma of a landmark (the trajectory
  // rows picked as landmarks are also in the dictionary: exact copies).
  std::vector<int> kept;
  for (int i = 0; i < cme.dict_x_size() && static_cast<int>(kept.size()) < snap.basis.rows() - 5; ++i) {
    const double near = (landmarks.rowwise() - cme.x_atoms().row(i)).rowwise().squaredNorm().minCoeff();
    if (near >= 0.002 * 0.5 * 0.5) kept.push_back(i);
  }
  ASSERT_EQ(static_cast<int>(kept.size()), snap.basis.rows() - 5);
  for (size_t j = 0; j < kept.size(); ++j) EXPECT_TRUE(snap.basis.row(5 + j) == cme.x_atoms().row(kept[j])) << j;
  SpectralMoments b = RoundTrip(a);
  EXPECT_EQ(Bytes(a), Bytes(b));
  EXPECT_EQ(b.landmarks(), 5);
  CompressedCme cme_b = cme;
  FeedSpectral(cme, a, x, n1, n1 + n2);
  FeedSpectral(cme_b, b, x, n1, n1 + n2);
  EXPECT_EQ(Bytes(a), Bytes(b));
  // The landmarks are written last but for one count: change their first coordinate.
  std::string bad = Bytes(a);
  const double changed = landmarks(0, 0) + 1;
  std::memcpy(&bad[bad.size() - 4 - 5 * 2 * sizeof(double)], &changed, sizeof(double));
  io::Reader r(bad, "f");
  const absl::Status s = SpectralMoments::Deserialize(r).status();
  EXPECT_NE(s.message().find("the landmarks are not the live basis's first rows"), std::string::npos) << s;
}

TEST(SpectralSerialization, TruncationBadTagAndHugeBasisAreRejected) {
  const RowMatrixXd x = Trajectory(400, 2, 13);
  CompressedCme cme(CmeOptions(false, 1000));
  SpectralMoments a(SpectralOptions(1.0));
  FeedSpectral(cme, a, x, 0, 400);
  const std::string bytes = Bytes(a);
  for (size_t n = 0; n < bytes.size(); n += (n < 200 ? 1 : 131)) {
    io::Reader r(std::string_view(bytes).substr(0, n), "spectral.snap");
    absl::StatusOr<SpectralMoments> c = SpectralMoments::Deserialize(r);
    ASSERT_FALSE(c.ok()) << "length " << n;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  }
  std::string bad = bytes;
  bad[0] = 'X';
  io::Reader r(bad, "f");
  EXPECT_EQ(SpectralMoments::Deserialize(r).status().message(),
            "f: offset 0: expected SpectralMoments (tag SPMO), found tag XPMO");
  // Basis size (offset 16 + 4 + 8 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 8 = 92) beyond max_basis.
  std::string big = bytes;
  const int32_t m = 1001;
  std::memcpy(&big[92], &m, 4);
  io::Reader rb(big, "f");
  const absl::Status s = SpectralMoments::Deserialize(rb).status();
  EXPECT_NE(s.message().find("spectral basis size is 1001 (field at offset 92), expected 0..1000"), std::string::npos)
      << s;
  // A previous epoch whose basis is not the live basis's first rows cannot be merged with the
  // live sums (nested epochs): the previous basis (written last) starts with the live basis's
  // first coordinate; change it there.
  ASSERT_TRUE(a.has_previous());
  const SpectralMomentsSnapshot snap = a.Snapshot();
  std::string atom(sizeof(double), '\0');
  std::memcpy(atom.data(), &snap.basis(0, 0), atom.size());
  const size_t at = bytes.rfind(atom);
  ASSERT_NE(at, std::string::npos);
  ASSERT_GT(at, bytes.find(atom));  // the previous basis's copy, not the live one
  std::string moved = bytes;
  moved[at + 7] ^= 0x10;
  io::Reader rm(moved, "f");
  EXPECT_NE(SpectralMoments::Deserialize(rm).status().message().find("not a prefix of the live basis"),
            std::string::npos);
}

}  // namespace
}  // namespace cmestream
