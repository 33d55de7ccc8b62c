#include "client/cli/timescale_text.h"

#include <cmath>
#include <cstdio>

namespace cmestream::cli {

std::string TimescaleCell(double value, double stderr_value) {
  char buf[64];
  if (std::isnan(value)) {
    std::snprintf(buf, sizeof buf, "%10s %-12s", "n/a", "");
  } else if (std::isinf(value)) {
    std::snprintf(buf, sizeof buf, "%10s %-12s", value > 0 ? "inf" : "-inf", "");
  } else if (!std::isfinite(stderr_value)) {
    std::snprintf(buf, sizeof buf, "%10.4g +- %-9s", value, "n/a");
  } else {
    std::snprintf(buf, sizeof buf, "%10.4g +- %-9.3g", value, stderr_value);
  }
  return buf;
}

}  // namespace cmestream::cli
