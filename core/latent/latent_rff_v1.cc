// The version-1 draw of the latent model's random Fourier features (see latent_rff_v1.h).
#include "core/latent/latent_rff_v1.h"

#include <cstdlib>
#include <random>

namespace cmestream {

absl::StatusOr<std::shared_ptr<const FeatureMap>> LatentRffVersion1(const LatentFeatureOptions& options) {
  if (!options.Validate().ok() || options.kind != LatentFeatureOptions::Kind::kRff) std::abort();
  constexpr double kPi = 3.14159265358979323846;
  // Exactly the draw of version 1's LatentFeatureMap: for each feature j, the d frequencies
  // Omega(., j) then the phase beta_j, from one generator and these two distribution objects.
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> normal(0.0, 1.0 / options.sigma);
  std::uniform_real_distribution<double> uni(0.0, 2 * kPi);
  MatrixXd omega(options.dim, options.num_features);
  VectorXd beta(options.num_features);
  for (int j = 0; j < options.num_features; ++j) {
    for (int i = 0; i < options.dim; ++i) omega(i, j) = normal(rng);
    beta[j] = uni(rng);
  }
  // A sigma near the smallest double makes 1/sigma, and so Omega, infinite: RffFrom refuses it.
  absl::StatusOr<FeatureMap> map = FeatureMap::RffFrom(std::move(omega), std::move(beta), options.sigma, options.seed);
  if (!map.ok()) return map.status();
  return std::make_shared<const FeatureMap>(*std::move(map));
}

}  // namespace cmestream
