// Simulated dynamical systems with known ground truth, for tests, demos and `cmestream simulate`.
#pragma once

#include <cstdint>

#include "core/common/types.h"

namespace cmestream::systems {

// A set of transition pairs (x_i, y_i), rows of x and y.
struct Transitions {
  // Room for n pairs of dimension dim, entries unset: every simulator writes each row.
  static Transitions Sized(int64_t n, int dim) {
    Transitions t;
    t.x.resize(n, dim);
    t.y.resize(n, dim);
    return t;
  }

  RowMatrixXd x;
  RowMatrixXd y;
};

// Unforced Duffing oscillator x'' = -delta x' - x (beta + alpha x^2) (paper 004, section 5),
// delta = 0.5, beta = -1, alpha = 1: two stable foci at (+-1, 0), saddle at the origin.
struct DuffingOptions {
  double delta = 0.5, beta = -1.0, alpha = 1.0;
  double dt = 0.25;   // sampling interval
  double box = 2.0;   // starts uniform in [-box, box]^2
  int substeps = 10;  // RK4 steps per dt
};
// n pairs: x uniform in the box, y = flow of x over dt. Deterministic given seed.
Transitions SimulateDuffing(int64_t n, uint64_t seed, const DuffingOptions& options = {});
// Flow map over time t (RK4).
Eigen::Vector2d DuffingFlow(const Eigen::Vector2d& state, double t, const DuffingOptions& options = {});
// Basin label of each point (+1: attracted to (1,0), -1: to (-1,0)), by long integration.
Eigen::VectorXi DuffingBasin(const Eigen::Ref<const RowMatrixXd>& points, const DuffingOptions& options = {});

// Overdamped Langevin diffusion in the 1-D double well V(x) = (x^2 - 1)^2:
// dX = -V'(X) dt + sqrt(2/beta) dW, Euler-Maruyama. One trajectory, returned as pairs at lag dt.
struct DoubleWellOptions {
  double beta = 3.0;  // inverse temperature
  double dt = 0.1;    // sampling interval
  int substeps = 10;
};
Transitions SimulateDoubleWell(int64_t n, uint64_t seed, const DoubleWellOptions& options = {});

}  // namespace cmestream::systems
