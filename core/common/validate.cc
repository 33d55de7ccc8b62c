// Value checks of batches (see validate.h).
#include "core/common/validate.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace cmestream {

absl::Status CheckFiniteValues(absl::string_view field, absl::string_view point, const double* values, int64_t count,
                               int dim) {
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat("field ", field, " value ", i, " (", point, " ", i / dim,
                                                     ", component ", i % dim, ") is ", values[i],
                                                     ", expected a finite number"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStateIds(absl::string_view field, const int64_t* ids, int64_t count, int64_t num_states) {
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= num_states) {
      return absl::InvalidArgumentError(absl::StrCat("field ", field, " value ", i, " is ", ids[i],
                                                     ", expected a state id in [0, ", num_states, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cmestream
