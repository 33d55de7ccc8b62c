// Markov chains with a known soft state aggregation P = U V^T and anchor states (paper 003,
// section 2, eq. 2; docs/algorithms.md §4), for tests, benchmarks and
// `cmestream simulate soft-aggregation --states P --meta R [--n N] [--seed S]`.
//
// THE MODEL
//   U (p x r): row i = P(Z_t = . | X_t = i), Dirichlet(u_concentration) rows.
//   V (p x r): column k = P(X_{t+1} = . | Z_t = k). Anchor state j of meta-state k has
//     V[j,k] > 0 and V[j,k'] = 0 for k' != k (paper 003, Definition 1, disaggregation anchor).
//     Non-anchor rows have every entry drawn from Uniform[non_anchor_floor, 1] (so no non-anchor
//     state is close to an anchor: max_k P(Z = k | X' = j) stays well below 1), anchor entries
//     are anchor_weight times a Uniform[non_anchor_floor, 1] draw; then columns are normalized to sum to 1.
//   P = U V^T is row-stochastic; a step samples Z ~ U[x,:] then X' ~ V[:,Z].
//   Hard (lumpable) variant: every state is an anchor of the block it belongs to (V columns
//     have disjoint supports, blocks of size ~p/r) and U rows depend only on the block
//     (U[i,:] = A[block(i),:], A an r x r Dirichlet-row matrix), so the chain is lumpable with
//     lumped transition matrix A.
//
// DETERMINISM
//   Everything is a function of the options and seeds (own splitmix64 generator).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"

namespace cmestream::systems {

struct SoftAggregationChainOptions {
  int states = 200;               // p >= 2
  int meta_states = 4;            // r, 1 <= r <= p
  int anchors_per_meta = 3;       // >= 1, r * anchors_per_meta <= p (ignored when hard)
  double non_anchor_floor = 0.2;  // V entries ~ Uniform[floor, 1], 0 <= floor <= 1
  double u_concentration = 1.0;   // Dirichlet parameter of U rows (and of A when hard), > 0
  double anchor_weight = 1.0;     // anchor entries are this times a Uniform[floor, 1] draw, > 0
  bool hard = false;              // lumpable hard aggregation (every state an anchor)
  uint64_t seed = 1;

  // OK or InvalidArgument("Violated constraint: ...").
  absl::Status Validate() const;
};

struct SoftAggregationChain {
  MatrixXd U;                             // p x r, rows sum to 1
  MatrixXd V;                             // p x r, columns sum to 1
  MatrixXd P;                             // p x p, P = U V^T
  VectorXd stationary;                    // pi, pi^T P = pi^T, sums to 1
  std::vector<std::vector<int>> anchors;  // per meta-state, sorted anchor states
  std::vector<int> block;                 // hard only: block (meta-state) of each state; else empty

  int states() const { return static_cast<int>(U.rows()); }
  int meta_states() const { return static_cast<int>(U.cols()); }
  // ground truth as JSON: {"states":p,"meta_states":r,"U":[[..]..],"V":[[..]..],"anchors":[[..]..]}
  // (U and V row-major lists of p rows of r numbers; anchors as state indices).
  std::string GroundTruthJson() const;
};

// requires options.Validate().ok() (else InvalidArgument).
absl::StatusOr<SoftAggregationChain> MakeSoftAggregationChain(const SoftAggregationChainOptions& options);

// A trajectory as transition pairs from[t] -> to[t] (to[t] == from[t+1]).
struct DiscreteTransitions {
  std::vector<int> from;
  std::vector<int> to;
};

// n transitions of one trajectory started from the stationary distribution. O(n (r + log p)).
// Deterministic given seed. requires n >= 0.
DiscreteTransitions SimulateSoftAggregationChain(const SoftAggregationChain& chain, int64_t n, uint64_t seed);

// N[i,j] = number of t with from[t] = i, to[t] = j (p x p).
MatrixXd CountTransitions(const DiscreteTransitions& t, int p);

// n diag(pi) P: the expected count matrix of n stationary transitions (noise-free input).
MatrixXd ExpectedCounts(const SoftAggregationChain& chain, double n);

}  // namespace cmestream::systems
