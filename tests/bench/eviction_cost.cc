// What an eviction and a daemon snapshot of evicted models cost (service/README.md "Eviction",
// "Snapshots"; docs/benchmarks.md "Restart with evicted models"): N default 1-channel models
// (σ auto, alarms on) fed 2,000 pairs of a daily-like cycle with noise, then each evicted
// (ModelRegistry's sweep does the same per model: encode, write its file), timed; with --fsync,
// each eviction also fsyncs its file and the directory afterwards, the durability an eviction
// used to pay (so the difference is what moved to the snapshot). Then two daemon snapshots:
// the first references every file and fsyncs it (SnapshotResult.files_synced, sync_seconds), the
// second finds them durable. Files go to a directory of its own under /tmp (removed at the end).
//   build/tests/bench/eviction_cost [N] [--fsync]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "service/engine/refresh.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/storage/file_util.h"
#include "service/storage/snapshot.h"
#include "tests/service/registry_batches.h"

namespace cs = cmestream::service;
namespace fs = std::filesystem;

namespace {
double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int Fail(const std::string& what) {
  std::fprintf(stderr, "eviction_cost: %s\n", what.c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  int n = 200;
  bool with_fsync = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--fsync") == 0) with_fsync = true;
    else n = std::max(1, std::atoi(argv[i]));
  }
  const std::string dir = "/tmp/cmestream_eviction_cost_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  int rc = 0;
  {
    auto store = cs::EvictionStore::Open(dir + "/evicted", {});
    if (!store.ok()) return Fail(std::string(store.status().message()));
    cs::Metrics metrics;
    cs::NullBatchLog log;
    cs::ModelRegistry reg({}, metrics, log);
    reg.SetSpill(store->get());
    std::mt19937_64 rng(1);
    std::normal_distribution<double> noise(0, 0.1);
    for (int i = 0; i < n && rc == 0; ++i) {
      cmestream::v1::ModelConfig c;
      c.set_name("m" + std::to_string(i));
      c.set_dim(1);
      c.set_refresh_interval_seconds(3600);
      if (!reg.Create(c).ok()) return Fail("create " + c.name());
      for (int off = 0; off < 2000; off += 200) {
        cmestream::v1::IngestBatch b;
        b.set_model(c.name());
        b.set_producer_id("p");
        b.set_offset(off);
        for (int t = off; t < off + 200; ++t) {
          b.add_x(std::sin(2 * M_PI * t / 96.0 + i) + noise(rng));
          b.add_y(std::sin(2 * M_PI * (t + 1) / 96.0 + i) + noise(rng));
        }
        if (!cs::test_helpers::ApplyBatch(reg, b).ok()) return Fail("ingest " + c.name());
      }
      if (cs::RefreshModel(**reg.Get(c.name())) == nullptr) return Fail("refresh " + c.name());
    }
    ::sync();  // the evictions start with nothing else to write back
    double evict_s = 0, fsync_s = 0;
    for (int i = 0; i < n; ++i) {
      auto m = *reg.Get("m" + std::to_string(i));
      const double t0 = Now();
      absl::StatusOr<bool> evicted = m->EvictIfIdle(1e-9);
      const double t1 = Now();
      if (!evicted.ok() || !*evicted) return Fail("evict " + m->name());
      evict_s += t1 - t0;
      if (with_fsync) {
        std::string newest;
        for (const auto& e : fs::directory_iterator(dir + "/evicted")) newest = std::max(newest, e.path().string());
        const int fd = ::open(newest.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::fsync(fd) != 0) return Fail("fsync " + newest);
        ::close(fd);
        if (!cs::files::FsyncDir(dir + "/evicted").ok()) return Fail("fsync of the directory");
        fsync_s += Now() - t1;
      }
    }
    std::printf("%d evictions, %.1f MB of files: %.2f ms each (encode + write) = %.0f evictions/s", n,
                static_cast<double>((*store)->bytes_written()) / 1e6, 1e3 * evict_s / n, n / evict_s);
    if (with_fsync) {
      std::printf("; + fsync of the file and the directory %.2f ms = %.0f evictions/s", 1e3 * fsync_s / n,
                  n / (evict_s + fsync_s));
    }
    std::printf("\n");
    cs::SnapshotOptions so;
    so.dir = dir + "/snapshots";
    so.interval_seconds = 0;
    cs::SnapshotManager snapshots(so, reg, {}, nullptr);
    for (int k = 1; k <= 2; ++k) {
      absl::StatusOr<cs::SnapshotResult> r = snapshots.TakeNow();
      if (!r.ok()) return Fail(std::string(r.status().message()));
      std::printf(
          "snapshot %d: %d models, %d referenced, %d files fsynced now, %llu bytes, %.3f s (of which %.3f s "
          "the fsyncs)\n",
          k, r->models, r->referenced, r->files_synced, static_cast<unsigned long long>(r->bytes), r->seconds,
          r->sync_seconds);
    }
  }
  fs::remove_all(dir);
  return rc;
}
