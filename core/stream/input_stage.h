// InputStage: a model's frozen input stage as the views and queries use it (docs/algorithms.md
// §1.13-§1.15): scale (InputScaler), then reduce (InputReduction), each optional. Apply maps the
// user's rows to the coordinates the estimators work in; Invert maps the estimators' rows (atoms,
// predictions) back to the user's units.
#pragma once

#include <optional>

#include "core/common/types.h"
#include "core/stream/input_reduction.h"
#include "core/stream/input_scaler.h"

namespace cmestream {

class InputStage {
 public:
  InputStage(std::optional<InputScaler> scaler, std::optional<InputReduction> reduction)
      : scaler_(std::move(scaler)), reduction_(std::move(reduction)) {}

  const InputScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  const InputReduction* reduction() const { return reduction_ ? &*reduction_ : nullptr; }

  // n x user dim -> n x estimator dim.
  RowMatrixXd Apply(RowMatrixXd rows) const {
    if (scaler_) scaler_->ApplyRows(rows);
    return reduction_ ? reduction_->ApplyRows(rows) : rows;
  }
  // n x estimator dim -> n x user dim.
  RowMatrixXd Invert(RowMatrixXd rows) const {
    if (reduction_) rows = reduction_->InvertRows(rows);
    if (scaler_) scaler_->InvertRows(rows);
    return rows;
  }

 private:
  std::optional<InputScaler> scaler_;
  std::optional<InputReduction> reduction_;
};

}  // namespace cmestream
