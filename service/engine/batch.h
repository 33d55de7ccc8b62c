// Validation of one IngestBatch, before any of it is applied (CONTRIBUTING.md "Bad input never
// corrupts a model").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/engine/wire_limits.h"

namespace cmestream::service {

// A validated batch: n pairs of d-vectors, pair i = (x(i), y(i)). Aliases the message it was
// built from (no copy), so it must not outlive it. Both payload forms look the same here:
// pairs have stride d in `x` and `y`; a trajectory has x = states, y = states + d.
// Discrete models (num_states > 0): dim == 0, x/y are null and x_ids/y_ids hold the ids
// (pairs: x_ids, y_ids; trajectory: x_ids = state_ids, y_ids = state_ids + 1).
// A trajectory batch of n pairs has n + 1 states: state k is x_at(k) / x_ids[k] for k < n,
// and the last one is y_at(n - 1) / y_ids[n - 1].
struct PairBatch {
  int dim = 0;
  int64_t n = 0;
  const double* x = nullptr;
  const double* y = nullptr;
  const int64_t* x_ids = nullptr;
  const int64_t* y_ids = nullptr;
  bool trajectory = false;
  bool gap = false;  // IngestBatch.gap: the trajectory starts a new episode
  // No pairs (n = 0): the write-ahead log's record that an explicit refresh ended the sigma
  // warm-up (Model::EndWarmup, IngestBatch.end_warmup).
  bool end_warmup = false;
  // Unix seconds the batch arrived (IngestBatch.received_unix_seconds once logged): the time
  // of the alarms it raises. The ingestor stamps it; replay reads it from the log.
  double time = 0;
  // The dictionary cap the batch is learned with (IngestBatch.dictionary_cap once logged; 0:
  // none): Model::Ingest sets it from the memory budget; replay reads it from the log.
  uint32_t dictionary_cap = 0;
  // IngestBatch.anomaly_scores: Model::Ingest returns each scored pair's anomaly score (not logged).
  bool anomaly_scores = false;

  bool discrete() const { return x_ids != nullptr; }
  const double* x_at(int64_t i) const { return x + i * dim; }
  const double* y_at(int64_t i) const { return y + i * dim; }
};

// Outcome of validation. `reason` is a short label for metrics (empty when ok):
// "id_length", "payload_form", "size", "empty", "non_finite", "magnitude".
struct BatchCheck {
  absl::Status status;
  std::string reason;
  PairBatch batch;
};

// Checks, in this order: producer_id / episode_id lengths (wire_limits.h), exactly one payload
// form (x/y or states), sizes (x and y equal multiples of dim; states a multiple of dim with
// >= 2 states), non-empty, every value finite and |value| <= max_abs (--max-abs-value; WAL
// replay passes infinity: what was accepted then is replayed whatever today's flag says).
// Messages name the batch index, the field and the expected value, e.g.
// "batch 3: field x has 7 values, expected a multiple of dim 2 of model 'duffing'".
// O(n d), reads every value once.
BatchCheck ValidateBatch(const v1::IngestBatch& batch, int dim, uint64_t batch_index,
                         double max_abs = kDefaultMaxAbsValue);

// The same for a discrete model with `num_states` = P states: exactly one payload form
// (x_ids/y_ids or state_ids), the continuous fields x/y/states empty, x_ids and y_ids of equal
// length, state_ids >= 2 ids, every id in [0, P). Messages name the batch, field, index, value
// and range, e.g. "batch 0: field y_ids value 3 is 7, expected a state id in [0, 5)".
// Extra reason label: "state_id". The id lengths are checked first, as above. O(n).
BatchCheck ValidateDiscreteBatch(const v1::IngestBatch& batch, uint32_t num_states, uint64_t batch_index);

}  // namespace cmestream::service
