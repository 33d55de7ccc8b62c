// Sparse transition counts (see transition_counts.h; docs/algorithms.md §2).
#include "core/counts/transition_counts.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/common/options_check.h"

namespace cmestream {

// ---------------------------------------------------------------------------------------------
// CountsSnapshot

double CountsSnapshot::Count(int i, int j) const {
  if (i < 0 || i >= num_states_ || j < 0 || j >= num_states_) return 0;
  const auto begin = col_.begin() + row_ptr_[i];
  const auto end = col_.begin() + row_ptr_[i + 1];
  const auto it = std::lower_bound(begin, end, j);
  if (it == end || *it != j) return 0;
  return val_[it - col_.begin()];
}

std::vector<CountTriplet> CountsSnapshot::Triplets() const {
  std::vector<CountTriplet> out;
  out.reserve(col_.size());
  for (int i = 0; i < num_states_; ++i) {
    for (int64_t e = row_ptr_[i]; e < row_ptr_[i + 1]; ++e) out.push_back({i, col_[e], val_[e]});
  }
  return out;
}

VectorXd CountsSnapshot::TransitionRow(int i) const {
  VectorXd row = VectorXd::Zero(num_states_);
  if (i < 0 || i >= num_states_ || !(visits_[i] > 0)) return row;
  for (int64_t e = row_ptr_[i]; e < row_ptr_[i + 1]; ++e) row[col_[e]] = val_[e] / visits_[i];
  return row;
}

EmpiricalTransitionMatrix CountsSnapshot::TransitionMatrix() const {
  EmpiricalTransitionMatrix out;
  out.P = MatrixXd::Zero(num_states_, num_states_);
  out.visited.assign(num_states_, false);
  for (int i = 0; i < num_states_; ++i) {
    if (!(visits_[i] > 0)) continue;
    out.visited[i] = true;
    for (int64_t e = row_ptr_[i]; e < row_ptr_[i + 1]; ++e) out.P(i, col_[e]) = val_[e] / visits_[i];
  }
  return out;
}

VectorXd CountsSnapshot::Stationary() const {
  const double total = visits_.sum();
  if (!(total > 0)) return VectorXd::Zero(num_states_);
  return visits_ / total;
}

DenseCounts CountsSnapshot::Dense() const {
  std::vector<bool> has_data(num_states_, false);
  for (int i = 0; i < num_states_; ++i) {
    for (int64_t e = row_ptr_[i]; e < row_ptr_[i + 1]; ++e) {
      if (val_[e] > 0) {
        has_data[i] = true;
        has_data[col_[e]] = true;
      }
    }
  }
  DenseCounts out;
  std::vector<int> index(num_states_, -1);
  for (int i = 0; i < num_states_; ++i) {
    if (has_data[i]) {
      index[i] = static_cast<int>(out.states.size());
      out.states.push_back(i);
    }
  }
  const int p = static_cast<int>(out.states.size());
  out.N = MatrixXd::Zero(p, p);
  for (int i = 0; i < num_states_; ++i) {
    for (int64_t e = row_ptr_[i]; e < row_ptr_[i + 1]; ++e) {
      if (index[i] >= 0 && index[col_[e]] >= 0) out.N(index[i], index[col_[e]]) = val_[e];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// TransitionCounts

absl::Status TransitionCounts::Options::Validate() const {
  if (max_states < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: max_states >= 1 (got ", max_states, ")"));
  }
  // Lower bound keeps the lazy unit gamma^-1 per sample far from overflow.
  if (!(forgetting >= 1e-6 && forgetting <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: 1e-6 <= forgetting <= 1 (got ", forgetting, ")"));
  }
  if (row_reserve < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: row_reserve >= 0 (got ", row_reserve, ")"));
  }
  return absl::OkStatus();
}

TransitionCounts::TransitionCounts(const Options& options) : options_(options) {
  AbortOnInvalidOptions(options_.Validate(), "TransitionCounts");
  inv_gamma_ = 1.0 / options_.forgetting;
  rows_.resize(options_.max_states);
  visits_stored_.assign(options_.max_states, 0.0);
}

absl::Status TransitionCounts::ValidatePair(int64_t i, int64_t j) const {
  const int64_t p = options_.max_states;
  if (i < 0 || i >= p) {
    return absl::InvalidArgumentError(absl::StrCat("state id i = ", i, " out of range [0, ", p, ")"));
  }
  if (j < 0 || j >= p) {
    return absl::InvalidArgumentError(absl::StrCat("state id j = ", j, " out of range [0, ", p, ")"));
  }
  return absl::OkStatus();
}

absl::Status TransitionCounts::AddBatch(const int64_t* i, const int64_t* j, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("negative batch size");
  for (int64_t t = 0; t < n; ++t) {
    const absl::Status status = ValidatePair(i[t], j[t]);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("pair ", t, ": ", status.message()));
    }
  }
  for (int64_t t = 0; t < n; ++t) Add(static_cast<int>(i[t]), static_cast<int>(j[t]));
  return absl::OkStatus();
}

void TransitionCounts::Add(int i, int j) {
  // Decay everything by gamma == grow the unit by 1/gamma; then add one unit.
  if (inv_gamma_ != 1.0) {
    scale_ *= inv_gamma_;
    if (scale_ > kRescaleAt) Rescale();
  }
  const int grown = std::max(i, j) + 1;
  if (grown > num_states_) {
    for (int s = num_states_; s < grown; ++s) rows_[s].reserve(options_.row_reserve);
    num_states_ = grown;
  }
  std::vector<Entry>& row = rows_[i];
  auto it = std::lower_bound(row.begin(), row.end(), j, [](const Entry& e, int col) { return e.j < col; });
  if (it != row.end() && it->j == j) {
    it->stored += scale_;
  } else {
    row.insert(it, Entry{j, scale_});
    ++nnz_;
  }
  visits_stored_[i] += scale_;
  total_stored_ += scale_;
  ++samples_;
}

void TransitionCounts::Rescale() {
  const double inv = 1.0 / scale_;
  total_stored_ = 0;
  nnz_ = 0;
  for (int i = 0; i < num_states_; ++i) {
    std::vector<Entry>& row = rows_[i];
    double visits = 0;
    size_t kept = 0;
    for (const Entry& e : row) {
      const double v = e.stored * inv;
      if (v >= kDropBelow) {
        row[kept++] = Entry{e.j, v};
        visits += v;
      }
    }
    row.resize(kept);  // shrinking never allocates
    nnz_ += static_cast<int64_t>(kept);
    visits_stored_[i] = visits;
    total_stored_ += visits;
  }
  scale_ = 1;
}

double TransitionCounts::Count(int i, int j) const {
  if (i < 0 || i >= num_states_) return 0;
  const std::vector<Entry>& row = rows_[i];
  auto it = std::lower_bound(row.begin(), row.end(), j, [](const Entry& e, int col) { return e.j < col; });
  if (it == row.end() || it->j != j) return 0;
  return it->stored / scale_;
}

double TransitionCounts::Visits(int i) const {
  if (i < 0 || i >= num_states_) return 0;
  return visits_stored_[i] / scale_;
}

CountsSnapshot TransitionCounts::Snapshot() const {
  CountsSnapshot s;
  s.num_states_ = num_states_;
  s.samples_ = samples_;
  s.total_weight_ = total_stored_ / scale_;
  s.row_ptr_.assign(num_states_ + 1, 0);
  s.col_.reserve(nnz_);
  s.val_.reserve(nnz_);
  s.visits_.resize(num_states_);
  const double inv = 1.0 / scale_;
  for (int i = 0; i < num_states_; ++i) {
    for (const Entry& e : rows_[i]) {
      s.col_.push_back(e.j);
      s.val_.push_back(e.stored * inv);
    }
    s.row_ptr_[i + 1] = static_cast<int64_t>(s.col_.size());
    s.visits_[i] = visits_stored_[i] * inv;
  }
  return s;
}

}  // namespace cmestream
