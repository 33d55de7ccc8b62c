#include "core/common/options_check.h"

#include <cstdlib>
#include <iostream>

namespace cmestream {

void AbortOnInvalidOptions(const absl::Status& validation, const char* who) {
  if (validation.ok()) return;
  std::cerr << who << ": invalid options: " << validation.message() << "\n";
  std::abort();
}

}  // namespace cmestream
