// Weighted k-means, metastable clusters, coarse graining and implied timescales
// (docs/algorithms.md §3.4; paper 000 Algorithm 3) against planted truth.
#include "core/cluster/metastable.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <Eigen/Eigenvalues>

#include "core/cluster/chain_timescales.h"
#include "core/systems/four_well.h"

namespace cmestream {
namespace {

TEST(WeightedKMeans, RecoversPlantedBlobsDeterministically) {
  std::mt19937_64 rng(4);
  std::normal_distribution<double> g(0.0, 0.1);
  const int per = 50;
  RowMatrixXd x(3 * per, 2);
  Eigen::VectorXi truth(3 * per);
  const double cx[3] = {0, 3, 0}, cy[3] = {0, 0, 3};
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < per; ++i) {
      x.row(c * per + i) << cx[c] + g(rng), cy[c] + g(rng);
      truth[c * per + i] = c;
    }
  const VectorXd w = VectorXd::Ones(3 * per);
  WeightedKMeansOptions o;
  o.k = 3;
  o.seed = 9;
  const WeightedKMeansResult a = *WeightedKMeans(x, w, o);
  const WeightedKMeansResult b = *WeightedKMeans(x, w, o);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.centroids, b.centroids);
  EXPECT_DOUBLE_EQ(WeightedMisclassification(truth, a.labels, w, 3), 0.0);
  EXPECT_LE(a.inertia, a.restart_inertia.minCoeff() + 1e-15);
  EXPECT_GE(a.iterations, 1);
  // Inertia of the planted partition: the per-point variance 2 * 0.1^2 (weights normalized).
  EXPECT_NEAR(a.inertia, 0.02, 0.006);
  EXPECT_EQ(NearestCentroid(a.centroids, x.topRows(1))[0], a.labels[0]);
}

TEST(WeightedKMeans, OneClusterIsTheWeightedMeanAndBadInputIsRejected) {
  RowMatrixXd x(3, 1);
  x << 0, 1, 10;
  VectorXd w(3);
  w << 1, 3, 0;  // the far point has no weight
  WeightedKMeansOptions o;
  o.k = 1;
  const WeightedKMeansResult r = *WeightedKMeans(x, w, o);
  EXPECT_NEAR(r.centroids(0, 0), 0.75, 1e-14);
  EXPECT_NEAR(r.inertia, 0.25 * 0.75 * 0.75 + 0.75 * 0.25 * 0.25, 1e-14);
  o.k = 3;  // only two points with positive weight
  EXPECT_EQ(WeightedKMeans(x, w, o).status().code(), absl::StatusCode::kInvalidArgument);
  w[0] = -1;
  o.k = 1;
  EXPECT_EQ(WeightedKMeans(x, w, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Misclassification, BestPermutationAndPerClusterNormalization) {
  Eigen::VectorXi truth(4), pred(4);
  truth << 0, 0, 1, 1;
  pred << 1, 1, 0, 1;  // swapped labels, one error in cluster 1
  VectorXd w(4);
  w << 1, 1, 3, 1;
  // With 0<->1 swapped, cluster 1 (mass 4) has its weight-1 point wrong: 1/4; the identity
  // permutation would cost 1 + 3/4.
  EXPECT_DOUBLE_EQ(WeightedMisclassification(truth, pred, w, 2), 0.25);
}

// Counts of a trajectory over state ids.
CountsSnapshot CountPath(const std::vector<int>& path, int p) {
  TransitionCounts::Options o;
  o.max_states = p;
  TransitionCounts c(o);
  for (size_t t = 0; t + 1 < path.size(); ++t) c.Add(path[t], path[t + 1]);
  return c.Snapshot();
}

TEST(MetastableClusters, LumpableBlocksAreRecoveredExactly) {
  const std::vector<int> sizes = {5, 8, 7};
  const systems::FiniteChain chain = systems::LumpableBlockChain(sizes, 0.9, 12);
  const int p = 20;
  const std::vector<int> path = systems::SampleChain(chain.P, 50000, 0, 13);
  EmbeddingMoments m(std::make_shared<const FeatureMap>(*FeatureMap::OneHot(p)), {});
  for (size_t t = 0; t + 1 < path.size(); ++t) {
    const double x = path[t], y = path[t + 1];
    m.Observe(&x, &y);
  }
  StateEmbedding::Options eo;
  eo.rank = 3;
  const StateEmbedding e = *StateEmbedding::Fit(m.Snapshot(), eo);
  const CountsSnapshot counts = CountPath(path, p);
  RowMatrixXd ids(p, 1);
  for (int i = 0; i < p; ++i) ids(i, 0) = i;
  WeightedKMeansOptions ko;
  ko.k = 3;
  ko.seed = 1;
  const MetastableClusters cl = *MetastableClusters::Fit(e, ids, counts.visits(), ko);
  EXPECT_DOUBLE_EQ(WeightedMisclassification(chain.blocks, cl.labels(), chain.pi, 3), 0.0);
  EXPECT_EQ(cl.Label(e, ids), cl.labels());

  // Coarse-grained chain: Q (0.9 on the diagonal, 0.05 off it) and block masses.
  const CoarseGrainedChain cg = *CoarseGrain(counts, cl.labels(), 3);
  const VectorXd masses = cl.Masses();
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(cg.transition.row(a).sum(), 1.0, 1e-12);
    EXPECT_NEAR(cg.transition(a, a), 0.9, 0.01);
    EXPECT_NEAR(cg.masses[a], masses[a], 1e-12);
    EXPECT_NEAR(masses[a], 1.0 / 3.0, 0.03);  // Q is doubly stochastic: uniform block masses
  }
  // Implied timescales: P has eigenvalues 1, 0.85, 0.85, then 0 (rank 3).
  const ImpliedTimescales its = *ImpliedTimescales::Fit(counts, 0.5, 3);
  EXPECT_NEAR(its.eigenvalue_moduli[0], 0.85, 0.02);
  EXPECT_NEAR(its.eigenvalue_moduli[1], 0.85, 0.02);
  EXPECT_LT(its.eigenvalue_moduli[2], 0.1);
  EXPECT_NEAR(its.timescales[0], -0.5 / std::log(0.85), 0.4);
}

// (3.11') on matrices with known spectra: the block chain Q (0.9 on the diagonal, 0.05 off it)
// has eigenvalues 1, 0.85, 0.85; a reducible chain keeps a second eigenvalue 1 (+inf); a row
// of a state never left gives eigenvalue 0 (timescale 0). Bad input is refused by name.
TEST(ImpliedTimescales, OfAMatrixMatchClosedForms) {
  MatrixXd q = MatrixXd::Constant(3, 3, 0.05);
  q.diagonal().setConstant(0.9);
  const ImpliedTimescales its = *TimescalesOfMatrix(q, 0.5, 3);
  ASSERT_EQ(its.timescales.size(), 2);
  for (int l = 0; l < 2; ++l) {
    EXPECT_NEAR(its.eigenvalue_moduli[l], 0.85, 1e-12);
    EXPECT_NEAR(its.timescales[l], -0.5 / std::log(0.85), 1e-9);
  }
  EXPECT_EQ(TimescalesOfMatrix(q, 0.5, 1)->timescales.size(), 1);
  MatrixXd two = MatrixXd::Identity(3, 3);
  two.row(2).setZero();
  const ImpliedTimescales r = *TimescalesOfMatrix(two, 0.1, 5);
  ASSERT_EQ(r.timescales.size(), 2);
  EXPECT_TRUE(std::isinf(r.timescales[0]));
  EXPECT_EQ(r.timescales[1], 0.0);
  // A 2-state chain: eigenvalues 1 and 1 - a - b.
  const MatrixXd p2 = (MatrixXd(2, 2) << 0.97, 0.03, 0.01, 0.99).finished();
  EXPECT_NEAR(TimescalesOfMatrix(p2, 0.1, 1)->timescales[0], -0.1 / std::log(0.96), 1e-12);
  EXPECT_EQ(TimescalesOfMatrix(MatrixXd::Zero(2, 3), 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TimescalesOfMatrix(q, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TimescalesOfMatrix(q, 1, -1).status().code(), absl::StatusCode::kInvalidArgument);
  MatrixXd bad = q;
  bad(1, 1) = std::nan("");
  EXPECT_EQ(TimescalesOfMatrix(bad, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// A chain of 400 states (above kDenseMaxSize: the leading eigenvalues by Arnoldi): four
// metastable blocks of 100 states, random rows within a block, a planted exit rate between
// blocks. Its leading moduli and timescales match the dense solver's (what every size used
// before) to 1e-9 relative, and the block-level closed form (the lumped 4-state chain with
// leaving probability e has eigenvalues 1 - 4e/3, three times) to the within-block mixing.
TEST(ImpliedTimescales, OfALargeChainMatchTheDenseSolver) {
  const int blocks = 4, per = 100, n = blocks * per;
  const double e = 0.003;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.1, 1.0);
  MatrixXd t = MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    const int b = i / per;
    double row = 0;
    for (int j = b * per; j < (b + 1) * per; ++j) row += (t(i, j) = u(rng));
    t.row(i).segment(b * per, per) *= (1 - e) / row;
    for (int c = 0; c < blocks; ++c) {
      if (c != b) t.row(i).segment(c * per, per).setConstant(e / (blocks - 1) / per);
    }
  }
  const ImpliedTimescales fast = *TimescalesOfMatrix(t, 0.1, 5);
  Eigen::EigenSolver<MatrixXd> dense(t, false);
  std::vector<double> mod(n);
  for (int i = 0; i < n; ++i) mod[static_cast<size_t>(i)] = std::abs(dense.eigenvalues()[i]);
  std::sort(mod.rbegin(), mod.rend());
  ASSERT_EQ(fast.timescales.size(), 5);
  for (int l = 0; l < 5; ++l) {
    EXPECT_NEAR(fast.eigenvalue_moduli[l], mod[static_cast<size_t>(l + 1)], 1e-9 * mod[static_cast<size_t>(l + 1)]);
    const double dense_t = -0.1 / std::log(mod[static_cast<size_t>(l + 1)]);
    EXPECT_NEAR(fast.timescales[l], dense_t, 1e-9 * dense_t) << l;
  }
  // Three slow modes at the lumped chain's 1 - 4e/3 = 0.996 (timescale 25 time units), then the
  // within-block ones (moduli ~0.1: random rows mix at once).
  for (int l = 0; l < 3; ++l) EXPECT_NEAR(fast.eigenvalue_moduli[l], 1 - 4 * e / 3, 1e-6) << l;
  EXPECT_LT(fast.eigenvalue_moduli[3], 0.3);

  // Two closed classes (the blocks stop exchanging), a state never left (a zero row) and a
  // transient state feeding both: eigenvalue 1 twice, as the dense solver says, so the slowest
  // timescale is infinite (a chain that does not mix), not the next eigenvalue's.
  MatrixXd split = t.topLeftCorner(2 * per + 2, 2 * per + 2);
  split.bottomRows(2).setZero();
  for (int i = 0; i < 2 * per; ++i) {
    const int b = i / per;
    split.row(i).setZero();
    split.row(i).segment(b * per, per) = t.row(i).segment(b * per, per) / t.row(i).segment(b * per, per).sum();
  }
  split(2 * per + 1, 0) = split(2 * per + 1, per) = 0.5;
  const ImpliedTimescales two = *TimescalesOfMatrix(split, 0.1, 3);
  ASSERT_EQ(two.timescales.size(), 3);
  EXPECT_NEAR(two.eigenvalue_moduli[0], 1.0, 1e-12);
  EXPECT_TRUE(std::isinf(two.timescales[0]) || two.timescales[0] > 1e10);
  Eigen::EigenSolver<MatrixXd> split_dense(split, false);
  std::vector<double> split_mod(static_cast<size_t>(split.rows()));
  for (Eigen::Index i = 0; i < split.rows(); ++i)
    split_mod[static_cast<size_t>(i)] = std::abs(split_dense.eigenvalues()[i]);
  std::sort(split_mod.rbegin(), split_mod.rend());
  for (int l = 0; l < 3; ++l) EXPECT_NEAR(two.eigenvalue_moduli[l], split_mod[static_cast<size_t>(l + 1)], 1e-9) << l;

  // What a short stream's count chain looks like (a 512-channel stream's 1,000 atoms after
  // 8,000 pairs: 783 in one class, 217 on their own, 12 of them absorbing): atoms seen once whose
  // only transition leads back to themselves are closed classes of their own, each entered from
  // the big class with a small probability. Eigenvalue 1 as many times plus once; Arnoldi on the
  // whole chain found it once (its Krylov space holds one eigenvector per distinct eigenvalue)
  // and reported the big class's next eigenvalue, a timescale of 20 for a chain that does not mix.
  const int states = 340, absorbing = 12;
  MatrixXd chain = MatrixXd::Zero(states, states);
  std::vector<bool> is_absorbing(states, false);
  for (int a = 0; a < absorbing; ++a) is_absorbing[static_cast<size_t>(11 + a * 27)] = true;
  for (int i = 0; i < states; ++i) {
    if (is_absorbing[static_cast<size_t>(i)]) {
      chain(i, i) = 1;
      continue;
    }
    // A slow walk on a ring (the atoms of a diffusion), to its neighbours within 3 places.
    for (int step = -3; step <= 3; ++step) {
      const int j = (i + step + states) % states;
      if (!is_absorbing[static_cast<size_t>(j)]) chain(i, j) = u(rng);
    }
    chain.row(i) /= chain.row(i).sum();
  }
  for (int a = 0; a < absorbing; ++a) {  // atom 3 + 27 a enters absorbing state 11 + 27 a
    chain.row(3 + 27 * a) *= 0.98;
    chain(3 + 27 * a, 11 + 27 * a) = 0.02;
  }
  const ImpliedTimescales seen_once = *TimescalesOfMatrix(chain, 0.1, 4);
  ASSERT_EQ(seen_once.timescales.size(), 4);
  for (int l = 0; l < 4; ++l) {
    EXPECT_NEAR(seen_once.eigenvalue_moduli[l], 1.0, 1e-9) << l;
    EXPECT_TRUE(std::isinf(seen_once.timescales[l]) || seen_once.timescales[l] > 1e7) << seen_once.timescales[l];
  }
}

TEST(MetastableClusters, FourWellClustersMatchTheWells) {
  const systems::FourWellOptions fw;
  const systems::Transitions data = systems::SimulateFourWell(60000, 17, fw);
  EmbeddingMoments m(std::make_shared<const FeatureMap>(*FeatureMap::Rff(1, 256, 0.4, 3)), {});
  ASSERT_TRUE(m.ObserveBatch(data.x, data.y).ok());
  StateEmbedding::Options eo;
  eo.rank = 4;
  const StateEmbedding e = *StateEmbedding::Fit(m.Snapshot(), eo);

  // Representative states: bin centers of a 100-bin grid, weights = visit counts (the role
  // dictionary atoms play for continuous models).
  const int bins = 100;
  const double lo = -2.5, hi = 2.5, width = (hi - lo) / bins;
  auto bin = [&](double x) { return std::clamp(static_cast<int>((x - lo) / width), 0, bins - 1); };
  TransitionCounts::Options co;
  co.max_states = bins;
  TransitionCounts counts(co);
  for (Eigen::Index t = 0; t < data.x.rows(); ++t) counts.Add(bin(data.x(t, 0)), bin(data.y(t, 0)));
  const CountsSnapshot cs = counts.Snapshot();
  RowMatrixXd centers(cs.num_states(), 1);
  for (int i = 0; i < cs.num_states(); ++i) centers(i, 0) = lo + (i + 0.5) * width;
  WeightedKMeansOptions ko;
  ko.k = 4;
  ko.seed = 5;
  const MetastableClusters cl = *MetastableClusters::Fit(e, centers, cs.visits(), ko);
  const Eigen::VectorXi wells = systems::FourWellIndex(centers, fw);
  const double miss = WeightedMisclassification(wells, cl.labels(), cs.visits(), 4);
  std::printf("%s; misclassification %.4f\n", cl.kmeans().BriefReport().c_str(), miss);
  EXPECT_LE(miss, 0.02);

  // Diffusion distances: points of different wells are far apart, points of one well close.
  const RowMatrixXd psi = e.Embed(data.x.topRows(2000));
  const Eigen::VectorXi w = systems::FourWellIndex(data.x.topRows(2000), fw);
  double intra = 0, inter = 0;
  int n_intra = 0, n_inter = 0;
  for (int a = 0; a < 2000; a += 7)
    for (int b = a + 1; b < 2000; b += 5) {
      const double d = (psi.row(a) - psi.row(b)).norm();
      if (w[a] == w[b]) {
        intra += d;
        ++n_intra;
      } else {
        inter += d;
        ++n_inter;
      }
    }
  ASSERT_GT(n_intra, 0);
  ASSERT_GT(n_inter, 0);
  const double ratio = (inter / n_inter) / (intra / n_intra);
  std::printf("mean inter-well / intra-well embedding distance: %.2f\n", ratio);
  EXPECT_GT(ratio, 5.0);

  // Coarse-grained chain: metastable wells keep most of their mass over one lag.
  const CoarseGrainedChain cg = *CoarseGrain(cs, cl.labels(), 4);
  for (int a = 0; a < 4; ++a) EXPECT_GT(cg.transition(a, a), 0.9);
  EXPECT_NEAR(cg.masses.sum(), 1.0, 1e-12);
  const VectorXd truth = systems::FourWellEigenvalues(4, fw);
  {
    // (3.11') of the coarse chain, recomputed from its matrix here; a hard partition is a
    // Galerkin projection on indicators: its timescales are at most the true ones (up to
    // noise), the slowest within 25 % of the truth on this well-separated system.
    const ImpliedTimescales coarse = *TimescalesOfMatrix(cg.transition, fw.tau, 4);
    ASSERT_EQ(coarse.timescales.size(), 3);
    const Eigen::VectorXcd ev = Eigen::EigenSolver<MatrixXd>(cg.transition, false).eigenvalues();
    std::vector<double> mod(4);
    for (int i = 0; i < 4; ++i) mod[i] = std::abs(ev[i]);
    std::sort(mod.rbegin(), mod.rend());
    for (int l = 0; l < 3; ++l) {
      const double t_true = -fw.tau / std::log(truth[l + 1]);
      EXPECT_NEAR(coarse.timescales[l], -fw.tau / std::log(mod[l + 1]), 1e-9 * coarse.timescales[l]);
      std::printf("timescale %d: coarse chain %.3f true %.3f (ratio %.3f)\n", l + 2, coarse.timescales[l], t_true,
                  coarse.timescales[l] / t_true);
      EXPECT_LT(coarse.timescales[l], 1.05 * t_true);
    }
    EXPECT_NEAR(coarse.timescales[0] / (-fw.tau / std::log(truth[1])), 1.0, 0.25);
  }
  // Implied timescales of the binned chain vs the true ones (-tau / log λ): a fine MSM at a
  // short lag underestimates them slightly (measured 2-4 %); allow 15 %.
  const ImpliedTimescales its = *ImpliedTimescales::Fit(cs, fw.tau, 3);
  for (int l = 0; l < 3; ++l) {
    const double t_true = -fw.tau / std::log(truth[l + 1]);
    std::printf("timescale %d: counts %.3f true %.3f\n", l + 2, its.timescales[l], t_true);
    EXPECT_NEAR(its.timescales[l] / t_true, 1.0, 0.15);
  }
}

TEST(MetastableClusters, TwoDimensionalMultiWellClusters) {
  const systems::MultiWell2dOptions mw;
  const systems::Transitions data = systems::SimulateMultiWell2d(30000, 8, mw);
  EmbeddingMoments m(std::make_shared<const FeatureMap>(*FeatureMap::Rff(2, 256, 0.4, 4)), {});
  ASSERT_TRUE(m.ObserveBatch(data.x, data.y).ok());
  StateEmbedding::Options eo;
  eo.rank = 4;
  const StateEmbedding e = *StateEmbedding::Fit(m.Snapshot(), eo);
  const VectorXd truth = systems::MultiWell2dEigenvalues(4, mw);
  std::printf("2-D singular values %.4f %.4f %.4f %.4f; truth %.4f %.4f %.4f %.4f\n", e.singular_values()[0],
              e.singular_values()[1], e.singular_values()[2], e.singular_values()[3], truth[0], truth[1], truth[2],
              truth[3]);
  for (int k = 1; k < 4; ++k) EXPECT_NEAR(e.singular_values()[k], truth[k], 0.05);
  // Representatives: the first 1500 sampled states, equal weights (empirical π).
  const RowMatrixXd reps = data.x.topRows(1500);
  WeightedKMeansOptions ko;
  ko.k = 4;
  const MetastableClusters cl = *MetastableClusters::Fit(e, reps, VectorXd::Ones(1500), ko);
  const double miss = WeightedMisclassification(systems::MultiWell2dIndex(reps), cl.labels(), VectorXd::Ones(1500), 4);
  std::printf("2-D misclassification %.4f\n", miss);
  EXPECT_LE(miss, 0.05);
}

}  // namespace
}  // namespace cmestream
