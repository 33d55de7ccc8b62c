// The daemon's memory budget (--max-memory): what one model may grow to, estimated from its
// config alone, and what the machine (or the container's cgroup) allows.
//
// Why estimates of the worst case: a model's matrices grow with its dictionary up to max_dict
// and with its statistics' sizes, all fixed by the config; refusing at creation is the only
// point where refusing loses nothing. A model that fits the budget can always reach its
// configured size. Views (refresh) and queries have their own transient working sets:
// refreshes run one at a time (a reserve is kept for one), queries are bounded per request
// (--max-query-mb).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"

namespace cmestream::service {

// Bytes a model built from `config` (normalized) may hold at its configured limits: learner
// matrices at max_dict, counts, RFF moments, spectral moments (live and serving epoch), latent
// reservoir and moments, predictive-state statistics, the sigma warm-up buffer, and its latest
// view.
double EstimateModelBytes(const v1::ModelConfig& config);

// The default budget: 0.8 x the cgroup memory limit (v2 memory.max, v1
// memory.limit_in_bytes) when one is set, else 0.8 x physical memory.
double DefaultMemoryBudget();
// The memory the daemon can have: the cgroup limit if set and below physical memory, else
// physical memory; 0 if unknown.
double HostMemoryLimit();
// OK unless `budget` (--max-memory, bytes) exceeds `host` (HostMemoryLimit(); 0: unknown, no
// check): then InvalidArgument with both sizes, since such a budget never refuses a model that
// the machine cannot hold.
absl::Status CheckMemoryBudgetFitsHost(double budget, double host);

// "1073741824", "512M", "8G", "1.5GiB", "2T" (K/M/G/T powers of 1024; optional "B"/"iB").
absl::StatusOr<double> ParseByteSize(const std::string& text);

// "1.5 GiB" style, for messages.
std::string FormatBytes(double bytes);

}  // namespace cmestream::service
