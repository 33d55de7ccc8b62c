// Registering a Prometheus metric family by name and help text, the one way every metric of the
// daemon is made (Metrics, the WAL's and the snapshot manager's series): each family's series
// are then added with their labels.
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cmestream::service {

inline prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& registry, const std::string& name,
                                                              const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

inline prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& registry, const std::string& name,
                                                          const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

inline prometheus::Family<prometheus::Histogram>& HistogramFamily(prometheus::Registry& registry,
                                                                  const std::string& name, const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

}  // namespace cmestream::service
