// Compatibility: the random Fourier features of a version-1 latent accumulator ("MVAC" v1).
//
// Version 1 of MultiViewAccumulator drew its own Omega and beta (std::normal_distribution and
// std::uniform_real_distribution over std::mt19937_64(seed), interleaved column by column), so
// one seed gave other features than FeatureMap::Rff, the map of the state embedding and, since
// version 2, of the latent model (docs/algorithms.md §5.1). A version-1 object stored only the
// seed, and its moments and reservoir were accumulated with those features: to load it exactly
// the decoder redraws them here. Version 2 stores Omega and beta, so this draw is needed for
// version-1 objects only (core/latent/multi_view_accumulator_io.cc) and must not be used for anything else.
//
// The draw goes through the standard library's distributions, whose algorithms are not fixed
// by the standard: it reproduces the features of a version-1 object written by a build with the
// same standard library (libstdc++, the only one the project builds with).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/embedding/feature_map.h"
#include "core/latent/latent_model.h"

namespace cmestream {

// requires: options.Validate().ok() and options.kind == kRff (aborts otherwise).
// ensures: the map with the Omega (d x D) and beta (D) that version 1 drew for these options:
// h(x) = sqrt(2/D) cos(Omega^T x + beta), docs/algorithms.md (3.1); InvalidArgument if the draw
// is not finite (a sigma so small that 1/sigma overflows: stored bytes no valid model wrote).
// O(dD); allocates the map.
absl::StatusOr<std::shared_ptr<const FeatureMap>> LatentRffVersion1(const LatentFeatureOptions& options);

}  // namespace cmestream
