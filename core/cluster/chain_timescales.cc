// Implied timescales of a transition matrix (see chain_timescales.h; docs/algorithms.md §3.4).
#include "core/cluster/chain_timescales.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <Eigen/Eigenvalues>

#include "absl/strings/str_cat.h"
#include "core/linalg/leading_eigen.h"

namespace cmestream {
namespace {

// The strongly connected components of the graph i -> j where t(i, j) != 0 (Tarjan's algorithm,
// iterative): component[i] for each state, components numbered from 0.
std::vector<int> Components(const MatrixXd& t, int* count) {
  const int n = static_cast<int>(t.rows());
  std::vector<int> index(n, -1), low(n, 0), component(n, -1), stack, call;
  std::vector<int> next(n, 0);  // the next successor of a state on the call stack to look at
  std::vector<bool> on_stack(n, false);
  int counter = 0;
  *count = 0;
  for (int root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    call.push_back(root);
    while (!call.empty()) {
      const int v = call.back();
      if (index[v] < 0) {
        index[v] = low[v] = counter++;
        stack.push_back(v);
        on_stack[v] = true;
      }
      bool descended = false;
      for (int& j = next[v]; j < n; ++j) {
        if (t(v, j) == 0) continue;
        if (index[j] < 0) {
          call.push_back(j);
          descended = true;
          ++j;
          break;
        }
        if (on_stack[j]) low[v] = std::min(low[v], index[j]);
      }
      if (descended) continue;
      call.pop_back();
      if (!call.empty()) low[call.back()] = std::min(low[call.back()], low[v]);
      if (low[v] == index[v]) {
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component[w] = *count;
        } while (w != v);
        ++*count;
      }
    }
  }
  return component;
}

// At least the k largest eigenvalue moduli of t (unsorted; all of them when t is small). In the
// order of its strongly connected components t is block-triangular, so its eigenvalues are those
// of the diagonal blocks. Each block is irreducible, so its eigenvalue of largest modulus is
// simple, and Arnoldi (core/linalg/leading_eigen.h) finds its leading ones; on the whole chain a
// Krylov space holds one eigenvector per distinct eigenvalue and would miss that a chain with
// several closed classes has eigenvalue 1 as many times (measured: the count chain of a
// 512-channel stream's 1,000 atoms, whose dense eigenvalues give no resolved timescale, gave
// 20.4 time units).
absl::StatusOr<VectorXd> LeadingModuli(const MatrixXd& t, int k) {
  int components = 0;
  const std::vector<int> component = Components(t, &components);
  std::vector<std::vector<int>> members(static_cast<size_t>(components));
  for (int i = 0; i < static_cast<int>(component.size()); ++i) members[static_cast<size_t>(component[i])].push_back(i);
  std::vector<double> moduli;
  for (const std::vector<int>& states : members) {
    const int s = static_cast<int>(states.size());
    MatrixXd block(s, s);
    for (int a = 0; a < s; ++a) {
      for (int b = 0; b < s; ++b) block(a, b) = t(states[a], states[b]);
    }
    VectorXcd values;
    if (!LeadingEigenvalues(block, std::min(k, s), &values)) {
      return absl::InternalError(
          absl::StrCat("the eigenvalues of a ", s, "-state block of the transition matrix did not converge"));
    }
    for (Eigen::Index l = 0; l < values.size(); ++l) moduli.push_back(std::abs(values[l]));
  }
  return Eigen::Map<const VectorXd>(moduli.data(), static_cast<Eigen::Index>(moduli.size()));
}

}  // namespace

absl::StatusOr<ImpliedTimescales> TimescalesOfMatrix(const Eigen::Ref<const MatrixXd>& transition, double lag_time,
                                                     int count) {
  if (!(lag_time > 0) || !std::isfinite(lag_time)) {
    return absl::InvalidArgumentError(absl::StrCat("lag time must be > 0 (got ", lag_time, ")"));
  }
  if (count < 0) return absl::InvalidArgumentError("count must be >= 0");
  if (transition.rows() != transition.cols() || transition.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition matrix is ", transition.rows(), " x ", transition.cols(), ", expected square"));
  }
  if (!transition.allFinite()) return absl::InvalidArgumentError("transition matrix has a non-finite entry");
  const int n = static_cast<int>(transition.rows());
  const int m = std::max(0, std::min(count, n - 1));
  VectorXd mod;
  if (n <= kDenseMaxSize) {
    Eigen::EigenSolver<MatrixXd> es(transition, /*computeEigenvectors=*/false);
    mod = es.eigenvalues().cwiseAbs();
  } else {
    absl::StatusOr<VectorXd> leading = LeadingModuli(transition, m + 1);
    if (!leading.ok()) return leading.status();
    mod = *std::move(leading);
  }
  std::sort(mod.data(), mod.data() + mod.size(), std::greater<double>());
  ImpliedTimescales out;
  out.eigenvalue_moduli = mod.segment(1, m);
  out.timescales.resize(m);
  for (int l = 0; l < m; ++l) {
    const double lam = out.eigenvalue_moduli[l];
    out.timescales[l] = lam >= 1 ? std::numeric_limits<double>::infinity() : lam <= 0 ? 0.0 : -lag_time / std::log(lam);
  }
  return out;
}

}  // namespace cmestream
