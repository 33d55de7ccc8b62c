// A real-shaped series, the recipe of scripts/fleet_loadgen.py, for the memory tests and
// tests/bench/model_memory (what a fed model holds).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace cmestream::test_support {

// Series `index` of `seed`, rows x channels (row-major): two cycles mixed into the channels (one
// channel: 1.0 and 0.4 of them), noise, 0-2 level shifts, then scaled and offset.
inline std::vector<double> RealShapedSeries(int index, int rows, int channels, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(index));
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> g(0, 1);
  const double periods[2] = {20 + 180 * u(rng), 20 + 180 * u(rng)};
  const double phases[2] = {2 * M_PI * u(rng), 2 * M_PI * u(rng)};
  std::vector<double> w(2 * channels);
  for (double& v : w) v = channels > 1 ? g(rng) : 0;
  if (channels == 1) w = {1.0, 0.4};
  const double noise = 0.05 + 0.25 * u(rng);
  std::vector<double> out(static_cast<size_t>(rows) * channels);
  for (int t = 0; t < rows; ++t) {
    const double c0 = std::sin(2 * M_PI * t / periods[0] + phases[0]);
    const double c1 = std::sin(2 * M_PI * t / periods[1] + phases[1]);
    for (int j = 0; j < channels; ++j) out[t * channels + j] = c0 * w[j] + c1 * w[channels + j] + noise * g(rng);
  }
  const int shifts = static_cast<int>(rng() % 3);
  for (int s = 0; s < shifts; ++s) {
    const int at = rows / 4 + static_cast<int>(rng() % static_cast<uint64_t>(rows - rows / 4));
    for (int j = 0; j < channels; ++j) {
      const double jump = 2.0 * g(rng);
      for (int t = at; t < rows; ++t) out[t * channels + j] += jump;
    }
  }
  const double scale = 0.5 + 19.5 * u(rng), offset = -100 + 200 * u(rng);
  for (double& v : out) v = v * scale + offset;
  return out;
}

}  // namespace cmestream::test_support
