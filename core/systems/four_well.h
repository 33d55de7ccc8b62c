// Metastable diffusions and finite Markov chains with known ground truth (paper 000 §5.1;
// docs/algorithms.md §3), for tests, demos and `cmestream simulate four-well`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/types.h"
#include "core/systems/duffing.h"  // Transitions

namespace cmestream::systems {

// ---------------------------------------------------------------------------------------------
// 1-D four-well diffusion: overdamped Langevin dX = -V'(X) dt + sqrt(2/beta) dW with
//   V(x) = barrier * cos^2(pi x) + confinement * (x/2)^8,
// wells near x = -1.5, -0.5, 0.5, 1.5, barriers near -1, 0, 1 (the confinement shifts them
// slightly; the exact barrier tops are found numerically). With the defaults (barrier 4,
// confinement 5, beta 1, tau 0.1) the transfer operator eigenvalues at lag tau are about
// 1, 0.983, 0.949, 0.927, then a gap to < 0.01: four metastable sets.
struct FourWellOptions {
  double barrier = 4.0;      // height of the cos^2 barriers, > 0
  double confinement = 5.0;  // weight of the (x/2)^8 wall, >= 0
  double beta = 1.0;         // inverse temperature (paper 000: sqrt(2) dB, i.e. beta = 1), > 0
  double tau = 0.1;          // sampling interval (lag), > 0
  double dt = 1e-3;          // Euler–Maruyama step, > 0 (rounded so that tau/dt is an integer)
  double x0 = -1.5;          // initial state
  int burn_in = 1000;        // lag steps discarded before the first pair, >= 0
};
double FourWellPotential(double x, const FourWellOptions& options = {});
double FourWellGradient(double x, const FourWellOptions& options = {});
// One trajectory x_0, x_1, ..., x_n at lag tau, returned as n pairs (x_t, x_{t+1}) (n x 1).
// Deterministic given seed (mt19937_64 + Box–Muller).
Transitions SimulateFourWell(int64_t n, uint64_t seed, const FourWellOptions& options = {});
// The three barrier tops (local maxima of V near -1, 0, 1), increasing.
Eigen::Vector3d FourWellBarriers(const FourWellOptions& options = {});
// Well index in {0, 1, 2, 3} (left to right) of each point: which barrier interval it is in.
Eigen::VectorXi FourWellIndex(const Eigen::Ref<const RowMatrixXd>& points, const FourWellOptions& options = {});
// Ground truth: the leading `count` eigenvalues (descending) of the transfer operator at lag
// tau, exp(tau mu_k) with mu_k the eigenvalues of a reversible finite-difference (birth–death,
// Scharfetter–Gummel-like) discretization of the generator on [-half_width, half_width] with
// `grid` points (reflecting ends). Converges as O(h^2); grid = 1500 on [-3, 3] is accurate to
// ~1e-4 for the defaults.
VectorXd FourWellEigenvalues(int count, const FourWellOptions& options = {}, int grid = 1500, double half_width = 3.0);
// Stationary density ∝ exp(-beta V) on a grid of points (normalized to integrate to 1).
VectorXd FourWellStationaryDensity(const Eigen::Ref<const VectorXd>& x, const FourWellOptions& options = {});

// ---------------------------------------------------------------------------------------------
// 2-D multi-well variant: V(x, y) = v(x) + v(y), v(s) = barrier cos^2(pi s) + confinement s^8:
// four wells near (±0.5, ±0.5), separated by barriers on the axes. Same SDE and options.
struct MultiWell2dOptions {
  double barrier = 3.0;
  double confinement = 5.0;
  double beta = 1.0;
  double tau = 0.1;
  double dt = 1e-3;
  double x0 = -0.5, y0 = -0.5;
  int burn_in = 1000;
};
double MultiWell2dPotential(double x, double y, const MultiWell2dOptions& options = {});
// n pairs of 2-D states (n x 2 each).
Transitions SimulateMultiWell2d(int64_t n, uint64_t seed, const MultiWell2dOptions& options = {});
// Well index 0..3: (x > 0) + 2 (y > 0) (the barriers sit on the axes by symmetry).
Eigen::VectorXi MultiWell2dIndex(const Eigen::Ref<const RowMatrixXd>& points);
// Leading eigenvalues: products of the 1-D eigenvalues of v (separable generator).
VectorXd MultiWell2dEigenvalues(int count, const MultiWell2dOptions& options = {}, int grid = 1000,
                                double half_width = 2.0);

// ---------------------------------------------------------------------------------------------
// Finite chains.
struct FiniteChain {
  MatrixXd P;              // p x p row-stochastic
  VectorXd pi;             // stationary distribution (pi^T P = pi^T, sums to 1)
  Eigen::VectorXi blocks;  // block of each state (LumpableBlockChain), else empty
};
// P = U V with U (p x r) rows uniform on the simplex and V (r x p) rows random distributions
// (Dirichlet(concentration)): rank r, all entries positive. Deterministic given seed.
FiniteChain LowRankChain(int p, int r, uint64_t seed, double concentration = 1.0);
// Exactly lumpable block chain: K = sizes.size() blocks; P[i,j] = Q[b(i), b(j)] w_j with
// Q = stay on the diagonal, (1 - stay)/(K - 1) elsewhere, and w a random distribution inside
// each block. Rows of one block are identical, so lumping is exact and rank(P) = K.
FiniteChain LumpableBlockChain(const std::vector<int>& sizes, double stay, uint64_t seed);
// Stationary distribution of a row-stochastic P (left eigenvector for the eigenvalue 1).
VectorXd StationaryDistribution(const MatrixXd& P);
// A trajectory of n + 1 states started at `start`; deterministic given seed.
std::vector<int> SampleChain(const MatrixXd& P, int64_t n, int start, uint64_t seed);

}  // namespace cmestream::systems
