// Process metrics of cmestreamd in the standard names every Prometheus client library uses
// (so generic dashboards and the resource requests in deploy/ can rely on them), read from
// /proc/self at each scrape:
//   process_resident_memory_bytes   RSS (statm field 2 x page size)
//   process_virtual_memory_bytes    VSZ (statm field 1 x page size)
//   process_open_fds                entries of /proc/self/fd
//   process_start_time_seconds      Unix time the daemon started
// prometheus-cpp has no process collector, hence this small Collectable.
#pragma once

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace cmestream::service {

class ProcessMetrics : public prometheus::Collectable {
 public:
  ProcessMetrics();
  std::vector<prometheus::MetricFamily> Collect() const override;

  // Resident set size in bytes from /proc/self/statm (0 if unreadable).
  static double ResidentBytes();

 private:
  const double start_time_seconds_;
};

}  // namespace cmestream::service
