// Seeded random numbers whose values are fixed by this code, not by the standard library's
// distribution implementations (libstdc++ and libc++ differ), so a seed reproduces the same
// features and simulated data everywhere. Two generators, kept for compatibility of what they
// seed: std::mt19937_64 (the RFF feature maps, whose draws snapshots rely on when they rebuild
// a feature map from its seed; the simulated systems) and SplitMix (common/splitmix.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace cmestream::internal {

// Uniform in [0, 1) from the top 53 bits of one draw.
inline double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Standard normal by Box–Muller, both outputs of a pair used (the second is kept as a spare).
class BoxMullerNormal {
 public:
  double operator()(std::mt19937_64& rng) {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Uniform01(rng);  // (0, 1]: the log is finite
    const double u2 = Uniform01(rng);
    const double r = std::sqrt(-2.0 * std::log(u1));
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    spare_ = r * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return r * std::cos(kTwoPi * u2);
  }

 private:
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace cmestream::internal
