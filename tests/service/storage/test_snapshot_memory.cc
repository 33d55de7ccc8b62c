// A daemon snapshot's memory (service/storage/snapshot.cc TakeNow, storage/spool_file.h): the
// bytes live through operator new while one is taken. In a binary of its own: it replaces the
// global operator new, which the sanitizer runtimes define too (test_snapshot runs under TSan).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <random>

#include "gtest/gtest.h"
#include "service/engine/batch_log.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/storage/snapshot.h"
#include "tests/service/storage/snapshot_test_support.h"

// Bytes live through operator new (strings, vectors: what a snapshot holds of each model) and
// their peak since the last reset, for ASnapshotHoldsOneModelsBytesAtATime. Eigen's aligned
// matrices bypass it (malloc), which is fine: the test is about encoded bytes.
namespace cmestream::service {
std::atomic<int64_t> g_live_bytes{0}, g_peak_bytes{0};

void CountBytes(void* p, bool add) {
  const int64_t n = static_cast<int64_t>(::malloc_usable_size(p));
  const int64_t live = g_live_bytes.fetch_add(add ? n : -n) + (add ? n : -n);
  for (int64_t peak = g_peak_bytes.load(); live > peak && !g_peak_bytes.compare_exchange_weak(peak, live);) {
  }
}

}  // namespace cmestream::service

void* operator new(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  cmestream::service::CountBytes(p, true);
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  cmestream::service::CountBytes(p, false);
  std::free(p);
}
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }

namespace cmestream::service {
namespace {

class SnapshotMemoryTest : public SnapshotTestBase {};

// A daemon snapshot spools each model's bytes as it takes them (storage/spool_file.h) instead of
// holding every resident model's until the header's count is known: a snapshot of 12 resident
// models raises the bytes live through operator new by a few models' encodings (one being encoded,
// with its writer's spare capacity, one read back, one checked): measured 20.4 MB for models of
// up to 4.7 MB, against 59.3 MB (more than the 52.7 MB of all 12) before. The spool leaves nothing
// in the directory.
TEST_F(SnapshotMemoryTest, ASnapshotHoldsOneModelsBytesAtATime) {
  ModelRegistry a(defaults_, metrics_a_, log_);
  size_t largest = 0, sum = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string name = "m" + std::to_string(i);
    v1::ModelConfig c = Config(name);
    c.set_rff_features(256);  // ~1.5 MB of state a model
    std::shared_ptr<Model> m = *a.Create(c);
    Apply(*m, Batch(301, static_cast<uint64_t>(i + 1), name));
    const size_t bytes = ModelSnapshotCodec::Encode(*m).bytes.size();
    largest = std::max(largest, bytes);
    sum += bytes;
  }
  SnapshotManager sa({dir_.string(), 0, 2}, a, defaults_, nullptr);
  const std::filesystem::path snaps = dir_;
  const int64_t before = g_live_bytes.load();
  g_peak_bytes.store(before);
  absl::StatusOr<SnapshotResult> taken = sa.TakeNow();
  ASSERT_TRUE(taken.ok()) << taken.status();
  const int64_t rise = g_peak_bytes.load() - before;
  std::printf("12 models: %zu bytes encoded (largest %zu); the snapshot's peak rise %lld bytes\n", sum, largest,
              static_cast<long long>(rise));
  EXPECT_EQ(taken->models, 12);
  EXPECT_GT(sum, 10 * largest / 2);  // the models are alike: the sum is what holding them all would cost
  EXPECT_LT(rise, static_cast<int64_t>(6 * largest));
  EXPECT_LT(rise, static_cast<int64_t>(sum / 2));
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(snaps)) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find("spool"), std::string::npos) << e.path();
  }
  EXPECT_GT(entries, 0);
  // And it loads: every model's bytes came back from the spool in order.
  ModelRegistry b(defaults_, metrics_b_, log_);
  SnapshotManager sb({dir_.string(), 0, 2}, b, defaults_, nullptr);
  ASSERT_TRUE(sb.LoadNewest().ok());
  for (int i = 0; i < 12; ++i) {
    const std::string name = "m" + std::to_string(i);
    EXPECT_EQ(ModelSnapshotCodec::Encode(**a.Get(name)).bytes, ModelSnapshotCodec::Encode(**b.Get(name)).bytes) << name;
  }
}

}  // namespace
}  // namespace cmestream::service
