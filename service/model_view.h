// Immutable, versioned views of a model, built by the refresh scheduler and read by queries
// (ARCHITECTURE.md "Data flow"; STYLE-EXAMPLES item 7).
//
// A ModelView never aliases learner buffers: queries hold a shared_ptr for one call and never
// wait for ingestion. Each estimator contributes an optional sub-view; later issues add
// members next to `cme` (embedding, clusters, aggregation, latent, predictive) without
// touching the ingestion or refresh plumbing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "cmestream/v1/cmestream.pb.h"
#include "core/cme/compressed_cme.h"
#include "core/koopman/koopman.h"

namespace cmestream::service {

// Eigenpairs computed and kept per view; KoopmanRequest.top may ask for at most this many.
inline constexpr int kStoredEigenpairs = 16;

// What the compressed CME contributes: its snapshot (Predict, GetDictionary) and the Koopman
// decomposition of W^T K_YX (GetKoopman).
struct CmeView {
  CmeSnapshot snapshot;
  KoopmanDecomposition koopman;
  double inverse_drift = 0;  // measured just before the snapshot
};

struct ModelView {
  uint64_t version = 0;   // 1, 2, ... per model
  uint64_t samples = 0;   // learner samples the view reflects
  std::chrono::steady_clock::time_point built_at;
  double build_seconds = 0;
  std::shared_ptr<const CmeView> cme;  // set once the learner exists

  v1::ViewInfo Info() const {
    v1::ViewInfo info;
    info.set_version(version);
    info.set_samples(samples);
    info.set_age_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - built_at).count());
    info.set_build_seconds(build_seconds);
    return info;
  }
};

}  // namespace cmestream::service
