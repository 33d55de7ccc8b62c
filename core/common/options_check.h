// Estimators' constructors take options their callers have validated (Options::Validate); an
// invalid set reaching a constructor is a programming error, not an input error.
#pragma once

#include "absl/status/status.h"

namespace cmestream {

// requires: `validation` is the result of the options' Validate(); `who` names the estimator.
// ensures: returns when it is OK; else writes "<who>: invalid options: <message>" to stderr and
// aborts.
void AbortOnInvalidOptions(const absl::Status& validation, const char* who);

}  // namespace cmestream
