// Validation of one IngestBatch, before any of it is applied (ARCHITECTURE.md "Bad input never
// corrupts a model").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "cmestream/v1/cmestream.pb.h"

namespace cmestream::service {

// A validated batch: n pairs of d-vectors, pair i = (x(i), y(i)). Aliases the message it was
// built from (no copy), so it must not outlive it. Both payload forms look the same here:
// pairs have stride d in `x` and `y`; a trajectory has x = states, y = states + d.
struct PairBatch {
  int dim = 0;
  int64_t n = 0;
  const double* x = nullptr;
  const double* y = nullptr;
  bool trajectory = false;

  const double* x_at(int64_t i) const { return x + i * dim; }
  const double* y_at(int64_t i) const { return y + i * dim; }
};

// Outcome of validation. `reason` is a short label for metrics (empty when ok):
// "payload_form", "size", "empty", "non_finite".
struct BatchCheck {
  absl::Status status;
  std::string reason;
  PairBatch batch;
};

// Checks, in this order: exactly one payload form (x/y or states), sizes (x and y equal
// multiples of dim; states a multiple of dim with >= 2 states), non-empty, every value finite.
// Messages name the batch index, the field and the expected value, e.g.
// "batch 3: field x has 7 values, expected a multiple of dim 2 of model 'duffing'".
// O(n d), reads every value once.
BatchCheck ValidateBatch(const v1::IngestBatch& batch, int dim, uint64_t batch_index);

}  // namespace cmestream::service
