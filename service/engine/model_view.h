// Immutable, versioned views of a model, built by the refresh scheduler and read by queries
// (CONTRIBUTING.md "Data flow", "Views are immutable").
//
// A ModelView is the learner's fitted views (core/stream/learner_view.h: one sub-view per
// estimator, each with its error when missing) plus what the service adds: a version, the
// samples it reflects, timings and the live held-out score. It never aliases learner buffers:
// queries hold a shared_ptr for one call and never wait for ingestion.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cmestream/v1/cmestream.pb.h"
#include "core/stream/learner_view.h"

namespace cmestream::service {

// The test-then-train score of the Koopman view (docs/user-guide.md "The held-out score"): the
// VAMP-E of the pairs learned after view `view_version` was published, scored by that view.
struct HeldoutScore {
  double score = std::numeric_limits<double>::quiet_NaN();  // NaN before a complete window
  uint64_t pairs = 0;
  uint64_t view_version = 0;
};

struct ModelView : LearnerView {
  uint64_t version = 0;  // 1, 2, ... per model
  uint64_t samples = 0;  // learner samples the view reflects
  // Model::Stats::progress at the snapshot: the refresh's "is there new data" and Refresh(wait)'s
  // target (samples drop at a reset; progress does not).
  uint64_t progress = 0;
  std::chrono::steady_clock::time_point built_at;
  double build_seconds = 0;
  HeldoutScore heldout;  // continuous models (with `cme`)
  // Inherited: view_seconds (per sub-view, in build order, "snapshot" first; the same figures
  // as the cmestream_view_build_seconds histogram), cme, input, counts ... forecast. The CME
  // snapshot's atoms are in the coordinates of `input` (scaled, reduced): queries map the points they are sent
  // (ScaleQueryRows) and invert what they report in state space (atoms, predictions).

  v1::ViewInfo Info() const {
    v1::ViewInfo info;
    info.set_version(version);
    info.set_samples(samples);
    info.set_age_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - built_at).count());
    info.set_build_seconds(build_seconds);
    for (const auto& [name, seconds] : view_seconds) (*info.mutable_build_seconds_by_view())[name] = seconds;
    return info;
  }
};

}  // namespace cmestream::service
