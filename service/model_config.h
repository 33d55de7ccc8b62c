// Model configuration: defaults, validation and the mapping onto the core learner's Options.
#pragma once

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "core/cme/compressed_cme.h"

namespace cmestream::service {

// Defaults that are not fixed by the API but by the daemon (its flags).
struct ConfigDefaults {
  double refresh_interval_seconds = 2.0;  // --refresh-interval
};

// Bounds that keep one model's memory predictable: the learner preallocates about
// 6 * max_dict^2 doubles (W, its average, two Grams and their inverses), i.e. 48 MB at the
// default max_dict = 1000 and 768 MB at kMaxDictCap.
inline constexpr uint32_t kMaxDictCap = 4000;
inline constexpr uint32_t kMaxDim = 4096;
inline constexpr uint32_t kMinAutoSigmaWarmup = 20;        // SelectBandwidth needs n >= 20
inline constexpr uint32_t kMaxAutoSigmaWarmup = 100000;    // buffered in memory

// Returns `config` with every optional field filled in (sigma "auto" is stored as 0), or
// InvalidArgument naming the first bad field and the expected value.
// ensures: the result maps onto a valid CompressedCme::Options (for any chosen sigma > 0).
absl::StatusOr<v1::ModelConfig> NormalizeModelConfig(const v1::ModelConfig& config,
                                                     const ConfigDefaults& defaults);

// True when the bandwidth must be chosen from warm-up pairs.
inline bool IsAutoSigma(const v1::ModelConfig& normalized) { return normalized.sigma() == 0; }

// requires: `normalized` came from NormalizeModelConfig, sigma > 0.
CompressedCme::Options CmeOptionsFor(const v1::ModelConfig& normalized, double sigma);

}  // namespace cmestream::service
