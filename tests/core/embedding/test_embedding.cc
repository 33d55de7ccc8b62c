// State embedding (docs/algorithms.md §3; paper 000 Algorithms 1-2) against closed forms and
// ground truth.
#include "core/embedding/state_embedding.h"

#include <cmath>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "core/counts/transition_counts.h"
#include "core/io/binary_io.h"
#include "core/kernels/gaussian.h"
#include "core/systems/four_well.h"

namespace cmestream {
namespace {

std::shared_ptr<const FeatureMap> Rff(int d, int n, double sigma, uint64_t seed) {
  return std::make_shared<const FeatureMap>(*FeatureMap::Rff(d, n, sigma, seed));
}
std::shared_ptr<const FeatureMap> OneHot(int p) { return std::make_shared<const FeatureMap>(*FeatureMap::OneHot(p)); }

// One-hot moments of a trajectory of state ids.
EmbeddingMomentsSnapshot OneHotMoments(const std::vector<int>& path, int p) {
  EmbeddingMoments m(OneHot(p), {});
  for (size_t t = 0; t + 1 < path.size(); ++t) {
    const double x = path[t], y = path[t + 1];
    m.Observe(&x, &y);
  }
  return m.Snapshot();
}

TEST(FeatureMap, RffIsDeterministicAndApproximatesTheKernel) {
  auto a = Rff(2, 4096, 0.7, 42), b = Rff(2, 4096, 0.7, 42), c = Rff(2, 4096, 0.7, 43);
  EXPECT_EQ(a->omega(), b->omega());
  EXPECT_EQ(a->beta(), b->beta());
  EXPECT_NE(a->omega(), c->omega());
  // First draws are fixed by mt19937_64 + our Box–Muller: same on every standard library.
  std::mt19937_64 rng(42);
  const double u1 = 1.0 - static_cast<double>(rng() >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  EXPECT_DOUBLE_EQ(a->omega()(0, 0), std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2) / 0.7);
  // h(a).h(b) ~ k(a, b): the RFF error has standard deviation <= 1/sqrt(N) ~ 0.016.
  RowMatrixXd pts(4, 2);
  pts << 0, 0, 0.3, -0.2, 1.0, 0.5, -0.8, 1.1;
  const RowMatrixXd h = a->Map(pts);
  const MatrixXd k = GaussianGram(pts, pts, 0.7);
  EXPECT_LT((h * h.transpose() - k).cwiseAbs().maxCoeff(), 0.06);
  EXPECT_FALSE(FeatureMap::Rff(0, 10, 1, 1).ok());
  EXPECT_FALSE(FeatureMap::Rff(1, 10, -1, 1).ok());
}

TEST(EmbeddingMoments, BatchedGemmUpdatesEqualExplicitSumsWithForgetting) {
  const auto f = Rff(2, 24, 0.5, 9);
  const double gamma = 0.97;
  EmbeddingMoments::Options o;
  o.batch_size = 7;
  o.forgetting = gamma;
  EmbeddingMoments m(f, o);
  std::mt19937_64 rng(1);
  std::normal_distribution<double> g;  // test data only; determinism across builds not needed
  const int n = 100;
  RowMatrixXd x(n, 2), y(n, 2);
  for (int t = 0; t < n; ++t) x.row(t) << g(rng), g(rng);
  y = 0.8 * x;
  ASSERT_TRUE(m.ObserveBatch(x, y).ok());
  EXPECT_EQ(m.buffered(), n % 7);
  const EmbeddingMomentsSnapshot s = m.Snapshot();
  const RowMatrixXd hx = f->Map(x), hy = f->Map(y);
  MatrixXd sx = MatrixXd::Zero(24, 24), sy = sx, ph = sx;
  double wsum = 0;
  for (int t = 0; t < n; ++t) {
    const double w = std::pow(gamma, n - 1 - t);
    sx += w * hx.row(t).transpose() * hx.row(t);
    sy += w * hy.row(t).transpose() * hy.row(t);
    ph += w * hx.row(t).transpose() * hy.row(t);
    wsum += w;
  }
  EXPECT_EQ(s.samples, n);
  EXPECT_NEAR(s.n, wsum, 1e-10);
  EXPECT_LT((s.Sx - sx).cwiseAbs().maxCoeff(), 1e-10);
  EXPECT_LT((s.Sy - sy).cwiseAbs().maxCoeff(), 1e-10);
  EXPECT_LT((s.Ph - ph).cwiseAbs().maxCoeff(), 1e-10);
}

TEST(EmbeddingMoments, BadInputIsRejectedAndChangesNothing) {
  EmbeddingMoments m(Rff(2, 16, 1.0, 1), {});
  RowMatrixXd x = RowMatrixXd::Zero(3, 2), y = RowMatrixXd::Zero(3, 2);
  y(2, 1) = std::nan("");
  const absl::Status s = m.ObserveBatch(x, y);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("y: point 2"), std::string::npos) << s.message();
  EXPECT_EQ(m.samples(), 0);
  EXPECT_EQ(StateEmbedding::Fit(m.Snapshot(), {}).status().code(), absl::StatusCode::kFailedPrecondition);

  EmbeddingMoments d(OneHot(5), {});
  RowMatrixXd i(1, 1), j(1, 1);
  i << 1;
  j << 5;
  const absl::Status r = d.ObserveBatch(i, j);
  EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.message().find("not an integer in [0, 5)"), std::string::npos) << r.message();
  EXPECT_EQ(d.samples(), 0);
  StateEmbedding::Options bad;
  bad.rank = 0;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// Discrete one-hot case = paper 000 Algorithm 1 on the normalized count matrix.
TEST(StateEmbedding, OneHotMatchesTruncatedSvdOfTheNormalizedCountMatrix) {
  const int p = 30, r = 3;
  const systems::FiniteChain chain = systems::LowRankChain(p, r, 5);
  const std::vector<int> path = systems::SampleChain(chain.P, 20000, 0, 6);
  const EmbeddingMomentsSnapshot snap = OneHotMoments(path, p);
  StateEmbedding::Options o;
  o.rank = r;
  const absl::StatusOr<StateEmbedding> e = StateEmbedding::Fit(snap, o);
  ASSERT_TRUE(e.ok()) << e.status();

  // Independent computation from the counts.
  TransitionCounts::Options co;
  co.max_states = p;
  TransitionCounts counts(co);
  for (size_t t = 0; t + 1 < path.size(); ++t) counts.Add(path[t], path[t + 1]);
  const DenseCounts dc = counts.Snapshot().Dense();
  ASSERT_EQ(static_cast<int>(dc.states.size()), p);
  const double n = dc.N.sum();
  const MatrixXd f = dc.N / n;  // joint frequencies
  const VectorXd dx = f.rowwise().sum(), dy = f.colwise().sum().transpose();
  const MatrixXd rmat = dx.array().rsqrt().matrix().asDiagonal() * f * dy.array().rsqrt().matrix().asDiagonal();
  Eigen::JacobiSVD<MatrixXd> svd(rmat);
  const VectorXd sv = svd.singularValues();
  ASSERT_EQ(e->singular_values().size(), p);
  EXPECT_LT((e->singular_values() - sv).cwiseAbs().maxCoeff(), 1e-10);
  EXPECT_NEAR(sv[0], 1.0, 1e-12);  // D^-1/2 F D'^-1/2 has sqrt(dx), sqrt(dy) as a σ = 1 pair
  const MatrixXd reshaped =
      dx.array().sqrt().matrix().asDiagonal() * TruncatedSvd(rmat, r) * dy.array().sqrt().matrix().asDiagonal();
  EXPECT_LT((e->ReshapedMoments() - reshaped).cwiseAbs().maxCoeff(), 1e-10);
  // Rows of the reshaped transition matrix diag(dx)^-1 F_r sum to 1 (σ_1 pair is kept).
  const MatrixXd pr = dx.cwiseInverse().asDiagonal() * e->ReshapedMoments();
  EXPECT_LT((pr.rowwise().sum() - VectorXd::Ones(p)).cwiseAbs().maxCoeff(), 1e-10);
  // p_hat(j|i) is a density w.r.t. the empirical y measure: p_hat(j|i) dy_j = P_r(i, j).
  RowMatrixXd ids(p, 1);
  for (int i = 0; i < p; ++i) ids(i, 0) = i;
  const MatrixXd dens = e->TransitionDensity(ids, ids);
  EXPECT_LT((dens * dy.asDiagonal() - pr).cwiseAbs().maxCoeff(), 1e-10);
  // Full rank reproduces the empirical matrix exactly.
  o.rank = p;
  const StateEmbedding full = *StateEmbedding::Fit(snap, o);
  EXPECT_LT((full.ReshapedMoments() - f).cwiseAbs().maxCoeff(), 1e-12);
}

// Theorem 1 / Figure 1 of paper 000: the reshaped estimate beats the empirical one, and both
// errors fall like n^-1/2.
TEST(StateEmbedding, ReshapedEstimateBeatsEmpiricalAndErrorFallsLikeInverseSqrtN) {
  const int p = 50, r = 3;
  const systems::FiniteChain chain = systems::LowRankChain(p, r, 21);
  const MatrixXd truth = chain.pi.asDiagonal() * chain.P;  // the joint matrix diag(π) P
  StateEmbedding::Options o;
  o.rank = r;
  const int64_t n1 = 5000, n2 = 16 * n1;
  const int seeds = 4;
  double emp[2] = {0, 0}, resh[2] = {0, 0}, alg1[2] = {0, 0};
  for (int s = 0; s < seeds; ++s) {
    for (int a = 0; a < 2; ++a) {
      const int64_t n = a == 0 ? n1 : n2;
      const std::vector<int> path = systems::SampleChain(chain.P, n, 0, 100 + s);
      const EmbeddingMomentsSnapshot snap = OneHotMoments(path, p);
      const MatrixXd f = snap.Ph / snap.n;
      const StateEmbedding e = *StateEmbedding::Fit(snap, o);
      emp[a] += (f - truth).norm() / seeds;
      resh[a] += (e.ReshapedMoments() - truth).norm() / seeds;
      alg1[a] += (TruncatedSvd(f, r) - truth).norm() / seeds;
    }
  }
  RecordProperty("empirical_error_n1", std::to_string(emp[0]));
  RecordProperty("reshaped_error_n1", std::to_string(resh[0]));
  std::printf("joint-matrix Frobenius error  n=%lld: empirical %.3g reshaped %.3g alg1 %.3g\n",
              static_cast<long long>(n1), emp[0], resh[0], alg1[0]);
  std::printf("                              n=%lld: empirical %.3g reshaped %.3g alg1 %.3g\n",
              static_cast<long long>(n2), emp[1], resh[1], alg1[1]);
  for (int a = 0; a < 2; ++a) {
    EXPECT_LT(resh[a], 0.6 * emp[a]);
    EXPECT_LT(alg1[a], 0.6 * emp[a]);
  }
  // 16x the data: error ratio ~ sqrt(16) = 4.
  EXPECT_GT(resh[0] / resh[1], 2.5);
  EXPECT_LT(resh[0] / resh[1], 6.0);
  EXPECT_GT(emp[0] / emp[1], 2.5);
  EXPECT_LT(emp[0] / emp[1], 6.0);
}

TEST(StateEmbedding, FourWellSingularValuesMatchTransferOperatorEigenvalues) {
  const systems::FourWellOptions fw;
  const systems::Transitions data = systems::SimulateFourWell(60000, 17, fw);
  EmbeddingMoments m(Rff(1, 256, 0.4, 3), {});
  ASSERT_TRUE(m.ObserveBatch(data.x, data.y).ok());
  StateEmbedding::Options o;
  o.rank = 4;
  const absl::StatusOr<StateEmbedding> e = StateEmbedding::Fit(m.Snapshot(), o);
  ASSERT_TRUE(e.ok()) << e.status();
  const VectorXd truth = systems::FourWellEigenvalues(5, fw);
  const VectorXd sv = e->singular_values();
  std::printf("%s\nsingular values %.4f %.4f %.4f %.4f %.4f; truth %.4f %.4f %.4f %.4f %.4f\n",
              e->summary().BriefReport().c_str(), sv[0], sv[1], sv[2], sv[3], sv[4], truth[0], truth[1], truth[2],
              truth[3], truth[4]);
  EXPECT_NEAR(sv[0], 1.0, 0.01);
  for (int k = 1; k < 4; ++k) EXPECT_NEAR(sv[k], truth[k], 0.02) << "k = " << k;
  // The spectral gap after the fourth value is what the rank report must find.
  EXPECT_EQ(e->summary().suggested_rank, 4);
  EXPECT_LT(sv[4], 0.5);
}

// The moments exactly as computed before trajectory reuse: each block of B pairs mapped with
// FeatureMap::Map on both sides, weighted, then the same rank-B updates and GEMM. The live
// accumulator must reproduce these bits on any stream (reuse only skips recomputing cosines).
class ReferenceMoments {
 public:
  ReferenceMoments(std::shared_ptr<const FeatureMap> f, int batch, double gamma)
      : f_(std::move(f)), b_(batch), inv_gamma_(1.0 / gamma) {
    const int n = f_->num_features(), d = f_->input_dim();
    sx_ = MatrixXd::Zero(n, n);
    sy_ = sx_;
    ph_ = sx_;
    xbuf_.resize(b_, d);
    ybuf_.resize(b_, d);
    hx_.resize(b_, n);
    hy_.resize(b_, n);
    w_.resize(b_);
  }
  void Observe(const double* x, const double* y) {
    for (int a = 0; a < xbuf_.cols(); ++a) {
      xbuf_(buffered_, a) = x[a];
      ybuf_(buffered_, a) = y[a];
    }
    if (++buffered_ == b_) Flush();
  }
  void Flush() {
    if (buffered_ == 0) return;
    const int b = buffered_;
    double unit = scale_;
    for (int k = 0; k < b; ++k) {
      unit *= inv_gamma_;
      w_[k] = std::sqrt(unit);
      n_ += unit;
    }
    scale_ = unit;
    auto hx = hx_.topRows(b);
    auto hy = hy_.topRows(b);
    f_->Map(xbuf_.topRows(b), hx);
    f_->Map(ybuf_.topRows(b), hy);
    hx.array().colwise() *= w_.head(b).array();
    hy.array().colwise() *= w_.head(b).array();
    sx_.selfadjointView<Eigen::Lower>().rankUpdate(hx.transpose());
    sy_.selfadjointView<Eigen::Lower>().rankUpdate(hy.transpose());
    ph_.noalias() += hx.transpose() * hy;
    buffered_ = 0;
  }
  EmbeddingMomentsSnapshot Snapshot() {
    Flush();
    EmbeddingMomentsSnapshot s;
    const double inv = 1.0 / scale_;
    s.Sx = MatrixXd(sx_.selfadjointView<Eigen::Lower>()) * inv;
    s.Sy = MatrixXd(sy_.selfadjointView<Eigen::Lower>()) * inv;
    s.Ph = ph_ * inv;
    s.n = n_ * inv;
    return s;
  }

 private:
  std::shared_ptr<const FeatureMap> f_;
  int b_;
  double inv_gamma_, scale_ = 1, n_ = 0;
  MatrixXd sx_, sy_, ph_;
  RowMatrixXd xbuf_, ybuf_, hx_, hy_;
  VectorXd w_;
  int buffered_ = 0;
};

void ExpectBitIdentical(const EmbeddingMomentsSnapshot& a, const EmbeddingMomentsSnapshot& b) {
  EXPECT_TRUE(a.Sx == b.Sx) << (a.Sx - b.Sx).cwiseAbs().maxCoeff();
  EXPECT_TRUE(a.Sy == b.Sy) << (a.Sy - b.Sy).cwiseAbs().maxCoeff();
  EXPECT_TRUE(a.Ph == b.Ph) << (a.Ph - b.Ph).cwiseAbs().maxCoeff();
  EXPECT_EQ(a.n, b.n);
}

// Trajectory streams (x_{t+1} = y_t) reuse each state's features; broken trajectories, a
// point equal in value but not in bits (-0.0 vs 0.0), pairs, forgetting, a snapshot in the
// middle and a serialize/restore must all give the bits of the reference.
TEST(EmbeddingMoments, TrajectoryFeatureReuseIsBitIdenticalToMappingEveryPoint) {
  const auto f = Rff(2, 64, 0.6, 5);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g;
  const int n = 700, batch = 16;
  RowMatrixXd states(n + 1, 2);
  states.row(0) << 0.5, -0.3;
  // head<2>(): a fixed-size destination, so GCC 12 does not warn (-Warray-bounds, a false
  // positive) about the 4-double AVX packet path of a 2-vector assigned to a dynamic row.
  for (int t = 0; t < n; ++t)
    states.row(t + 1).head<2>() = 0.9 * states.row(t) + 0.3 * Eigen::RowVector2d(g(rng), g(rng));
  RowMatrixXd x = states.topRows(n), y = states.bottomRows(n);
  // Breaks: new starting points at a block boundary, inside a block, and in the last pairs.
  for (int t : {batch * 3, batch * 5 + 7, n - 2}) x.row(t) << g(rng), g(rng);
  x(100, 0) = 0.0;  // value-equal, bit-different point: y(99) = -0.0
  y(99, 0) = -0.0;
  for (double gamma : {1.0, 0.99}) {
    EmbeddingMoments::Options o;
    o.batch_size = batch;
    o.forgetting = gamma;
    EmbeddingMoments live(f, o);
    ReferenceMoments ref(f, batch, gamma);
    std::optional<EmbeddingMoments> restored;
    for (int t = 0; t < n; ++t) {
      live.Observe(x.row(t).data(), y.row(t).data());
      ref.Observe(x.row(t).data(), y.row(t).data());
      if (t == 250) {
        (void)live.Snapshot();  // folds a copy; must not disturb the live reuse state
        io::Writer w;
        live.Serialize(w);
        io::Reader r(w.data(), "test");
        absl::StatusOr<EmbeddingMoments> back = EmbeddingMoments::Deserialize(r);
        ASSERT_TRUE(back.ok()) << back.status();
        restored.emplace(*std::move(back));
      } else if (t > 250) {
        restored->Observe(x.row(t).data(), y.row(t).data());
      }
    }
    const EmbeddingMomentsSnapshot want = ref.Snapshot();
    ExpectBitIdentical(live.Snapshot(), want);
    ExpectBitIdentical(restored->Snapshot(), want);
    // Reused: every flushed pair except the first, the three breaks and the -0.0 one.
    const int64_t flushed = n / batch * batch;
    EXPECT_EQ(live.reused_features(), flushed - 1 - 3 - 1 + (n - 2 >= flushed ? 1 : 0));
  }
  // Independent pairs: nothing to reuse, same bits.
  EmbeddingMoments pairs(f, {});
  ReferenceMoments ref(f, EmbeddingMoments::Options{}.batch_size, 1.0);
  for (int t = 0; t < n; ++t) {
    const Eigen::RowVector2d a(g(rng), g(rng)), b(g(rng), g(rng));
    pairs.Observe(a.data(), b.data());
    ref.Observe(a.data(), b.data());
  }
  ExpectBitIdentical(pairs.Snapshot(), ref.Snapshot());
  EXPECT_EQ(pairs.reused_features(), 0);
}

}  // namespace
}  // namespace cmestream
