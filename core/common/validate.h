// The value checks of a batch of points or state ids, in one place: the learner
// (StreamingLearner::Observe, core/stream/streaming_learner.cc) and the daemon's batch
// validation (service/engine/batch.cc, which prefixes "batch <index>: " and appends " (model '<name>')")
// return the same messages, which name the field, the value's index, the point it belongs to
// and what was expected (CONTRIBUTING.md "Messages name what is wrong").
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cmestream {

// A packed field of `count` doubles, `dim` per point (a wire field x, y or states).
// requires: values points to count doubles (count >= 0; values may be null when count == 0);
// dim >= 1.
// ensures: OK iff every value is finite; else InvalidArgument for the first non-finite value i:
//   "field <field> value <i> (<point> <i / dim>, component <i % dim>) is <value>, expected a finite number"
// e.g. CheckFiniteValues("states", "state", ...) -> "field states value 9 (state 4, component 1)
// is nan, expected a finite number". O(count), reads every value once; allocates only the
// message of an error.
absl::Status CheckFiniteValues(absl::string_view field, absl::string_view point, const double* values, int64_t count,
                               int dim);

// A field of `count` state ids of a discrete model with num_states = P states.
// requires: ids points to count ids (count >= 0; null when count == 0).
// ensures: OK iff every id is in [0, P); else InvalidArgument for the first id i out of range:
//   "field <field> value <i> is <id>, expected a state id in [0, <P>)"
// O(count); allocates only the message of an error.
absl::Status CheckStateIds(absl::string_view field, const int64_t* ids, int64_t count, int64_t num_states);

}  // namespace cmestream
