// Shared by the snapshot tests (test_snapshot, test_snapshot_memory): a noisy 2-D rotation's
// batches, a small model config and a fixture with a scratch directory.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "service/engine/batch.h"
#include "service/engine/batch_log.h"
#include "service/engine/model.h"
#include "service/engine/model_config.h"
#include "service/observability/metrics.h"

namespace cmestream::service {

// A trajectory batch of n states of a noisy 2-D rotation, deterministic in `seed`.
inline v1::IngestBatch Batch(int n, uint64_t seed, const std::string& model) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 0.05);
  v1::IngestBatch b;
  b.set_model(model);
  double x0 = 1, x1 = 0;
  for (int t = 0; t < n; ++t) {
    b.add_states(x0);
    b.add_states(x1);
    const double a = 0.3;
    const double y0 = std::cos(a) * x0 - std::sin(a) * x1 + noise(rng),
                 y1 = std::sin(a) * x0 + std::cos(a) * x1 + noise(rng);
    x0 = y0;
    x1 = y1;
  }
  return b;
}

inline void Apply(Model& m, const v1::IngestBatch& b) {
  BatchCheck check = ValidateBatch(b, 2, 0);
  ASSERT_TRUE(check.status.ok()) << check.status;
  ASSERT_TRUE(m.Ingest(check.batch, "p", 0, 0).ok());
}

inline v1::ModelConfig Config(const std::string& name) {
  v1::ModelConfig c;
  c.set_name(name);
  c.set_dim(2);
  c.set_latent_states(2);
  c.set_window(2);
  c.set_rff_features(32);
  c.set_auto_sigma_warmup(100);
  return c;
}

// A scratch directory per test suite and process (removed before and after each test), a
// batch log that keeps nothing, two registries' metrics and the defaults.
class SnapshotTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string suite = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    dir_ = std::filesystem::temp_directory_path() / ("cmestream-" + suite + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  NullBatchLog log_;
  Metrics metrics_a_, metrics_b_;
  ConfigDefaults defaults_;
};

}  // namespace cmestream::service
