// Text cells of `cmestream timescales`: one implied timescale with its error bar, fixed width so
// the columns line up, and never "nan" or "inf +- nan" (an infinite timescale has no error bar
// to print; an undefined one is "n/a").
#pragma once

#include <string>

namespace cmestream::cli {

// Width of every cell TimescaleCell returns.
inline constexpr int kTimescaleCellWidth = 23;

// "      12.34 +- 0.567    " for finite value and error; "        inf" (padded) for +inf, which
// a mode with |mu| >= 1 has and whose jackknife error is undefined; "        n/a" (padded) for
// NaN; "      12.34 +- n/a" when the error is not finite (fewer than 2 blocks).
std::string TimescaleCell(double value, double stderr_value);

}  // namespace cmestream::cli
