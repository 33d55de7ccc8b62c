// Test helpers shared by the service tests that drive a ModelRegistry directly (test_wal.cc's
// replay tests, test_eviction.cc): a small 2-d continuous model, deterministic batches of a
// 2-d map, and a batch applied as the ingestion path applies it (validated, then Model::Ingest).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/metric_family.h"
#include "service/engine/batch.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"

namespace cmestream::service::test_helpers {

// dim 2, sigma 0.5 (no warm-up), max_dict 60, no timer-driven refresh.
inline v1::ModelConfig SmallMapConfig(const std::string& name) {
  v1::ModelConfig c;
  c.set_name(name);
  c.set_dim(2);
  c.set_sigma(0.5);
  c.set_max_dict(60);
  c.set_refresh_interval_seconds(3600);
  return c;
}

// n pairs of a deterministic 2-d map (a rotation with a small nonlinearity), x uniform on
// [-2, 2]^2 drawn from `seed`, as producer `producer` at `offset`.
inline v1::IngestBatch SmallMapBatch(const std::string& model, const std::string& producer, uint64_t offset, int n,
                                     uint64_t seed) {
  v1::IngestBatch b;
  b.set_model(model);
  b.set_producer_id(producer);
  b.set_offset(offset);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int i = 0; i < n; ++i) {
    const double x0 = u(rng), x1 = u(rng);
    b.add_x(x0);
    b.add_x(x1);
    b.add_y(0.9 * x1 + 0.1 * x0 * x0);
    b.add_y(-0.9 * x0);
  }
  return b;
}

// The batch validated and ingested into its model of `reg` (no WAL sequence: 0).
inline absl::StatusOr<Model::IngestResult> ApplyBatch(ModelRegistry& reg, const v1::IngestBatch& b) {
  auto model = reg.Get(b.model());
  if (!model.ok()) return model.status();
  BatchCheck check = ValidateBatch(b, (*model)->dim(), 0);
  if (!check.status.ok()) return check.status;
  return (*model)->Ingest(check.batch, b.producer_id(), b.offset(), 0, b.episode_id());
}

// The value of a series of the daemon's registry (NaN if absent): a
// counter's or gauge's value, a histogram's sample count.
inline double Series(Metrics& metrics, const std::string& family, const std::string& label = "",
                     const std::string& value = "") {
  for (const prometheus::MetricFamily& f : metrics.registry()->Collect()) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      bool match = label.empty();
      for (const prometheus::ClientMetric::Label& l : m.label) match |= l.name == label && l.value == value;
      if (!match) continue;
      if (f.type == prometheus::MetricType::Counter) return m.counter.value;
      if (f.type == prometheus::MetricType::Histogram) return static_cast<double>(m.histogram.sample_count);
      return m.gauge.value;
    }
  }
  return std::nan("");
}

}  // namespace cmestream::service::test_helpers
