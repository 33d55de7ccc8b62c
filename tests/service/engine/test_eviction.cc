// Eviction of idle models (service/engine/model.h EVICTION, service/storage/snapshot.h
// EvictionStore): an evicted model frees its learner and its memory charge, keeps answering
// from its view, alarms and digest, and is loaded back by its next batch bit for bit (its state
// digest equals a twin's that was never evicted and got the same batches); exactly-once
// survives the reload; daemon snapshots, WAL replay, export/import and deletion of an evicted
// model keep every byte; an evicted fork is loaded back by its parent's next batch and equals
// a twin's fork; a damaged file refuses the reload with DataLoss and nothing changes.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "service/daemon.h"
#include "service/engine/batch.h"
#include "service/engine/model_config.h"
#include "service/engine/refresh.h"
#include "service/engine/registry.h"
#include "service/flags.h"
#include "service/observability/metrics.h"
#include "service/storage/crc32c.h"
#include "service/storage/recovery.h"
#include "service/storage/snapshot.h"
#include "service/storage/wal.h"
#include "tests/service/registry_batches.h"

namespace cmestream::service {
namespace {

namespace fs = std::filesystem;

// Removed at the end of each test, also when an assertion fails.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("cmestream_evict_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// tests/service/registry_batches.h
constexpr auto& Config = test_helpers::SmallMapConfig;
constexpr auto& Batch = test_helpers::SmallMapBatch;
constexpr auto& Apply = test_helpers::ApplyBatch;

using test_helpers::Series;

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

// The options of the snapshots of `dir` (DATA_DIR/snapshots, no periodic thread).
SnapshotOptions SnapshotsOf(const TempDir& dir) {
  SnapshotOptions so;
  so.dir = dir.sub("snapshots");
  so.interval_seconds = 0;
  return so;
}

// A daemon snapshot of `reg` now, into `dir`'s snapshots (keeping the newest 2).
absl::StatusOr<SnapshotResult> TakeSnapshot(const TempDir& dir, ModelRegistry& reg, const BatchLog* log) {
  SnapshotManager snapshots(SnapshotsOf(dir), reg, {}, log);
  return snapshots.TakeNow();
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Rewrites the file in place (the same inode: every hard link to it sees the new bytes).
void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The only file in `dir`.
std::string OnlyFile(const std::string& dir) { return fs::directory_iterator(dir)->path().string(); }

// A daemon's parts: a registry with a WAL and the eviction store.
struct Daemonish {
  explicit Daemonish(const TempDir& dir, const std::string& wal = "wal") : reg({}, metrics, log) {
    WalOptions o;
    o.dir = dir.sub(wal);
    o.sync = WalSync::kNever;
    auto opened = OpenAndReplayWal(o, 0, reg, nullptr, nullptr, nullptr);
    EXPECT_TRUE(opened.ok()) << opened.status();
    this->wal = *std::move(opened);
    log.Install(this->wal.get());
    auto s = EvictionStore::Open(dir.sub("evicted"), {});
    EXPECT_TRUE(s.ok()) << s.status();
    store = *std::move(s);
    reg.SetSpill(store.get());
  }
  std::unique_ptr<EvictionStore> store;  // outlives the registry's models
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg;
  std::unique_ptr<Wal> wal;
};

// A registry that never evicts nor restarts: the state each test compares with.
struct Twin {
  Metrics metrics;
  NullBatchLog log;
  ModelRegistry reg{{}, metrics, log};
};

// Model `name` created in each registry and fed the same 300 pairs of producer "p".
void CreateAndFeed(std::initializer_list<ModelRegistry*> registries, const char* name) {
  for (ModelRegistry* r : registries) {
    ASSERT_TRUE(r->Create(Config(name)).ok());
    ASSERT_TRUE(Apply(*r, Batch(name, "p", 0, 300, name[0])).ok());
  }
}

// A view of everything `m` learned, then `m` evicted (the sweep's two conditions met at once).
void RefreshAndEvict(Model& m) {
  ASSERT_NE(RefreshModel(m), nullptr);
  ASSERT_TRUE(m.EvictIfIdle(1e-9).ok());
}

// Model "m" of `d`, created and fed 300 pairs of producer "p".
std::shared_ptr<Model> FedModel(Daemonish& d) {
  EXPECT_TRUE(d.reg.Create(Config("m")).ok());
  EXPECT_TRUE(Apply(d.reg, Batch("m", "p", 0, 300, 1)).ok());
  return *d.reg.Get("m");
}

TEST(Eviction, EvictedModelAnswersFromMemoryAndReloadsBitForBit) {
  TempDir dir("reload");
  Daemonish d(dir);
  Twin twin_parts;  // never evicted
  ModelRegistry& twin = twin_parts.reg;
  ASSERT_TRUE(d.reg.Create(Config("m")).ok());
  ASSERT_TRUE(twin.Create(Config("m")).ok());
  for (ModelRegistry* r : {&d.reg, &twin}) ASSERT_TRUE(Apply(*r, Batch("m", "p", 0, 300, 1)).ok());
  std::shared_ptr<Model> m = *d.reg.Get("m");
  const double committed_live = d.reg.committed_bytes();
  EXPECT_GT(committed_live, 0);

  // Not evicted while its view does not reflect what it learned.
  EXPECT_EQ(d.reg.EvictIdle(1e-9, 10), 0);
  EXPECT_FALSE(m->evicted());
  ASSERT_NE(RefreshModel(*m), nullptr);
  const std::shared_ptr<const ModelView> view = m->view();
  const uint64_t digest = m->StateDigest();
  const auto alarms = m->Alarms(0);
  ASSERT_TRUE(alarms.ok()) << alarms.status();
  // Not evicted while used more recently than the idle time.
  EXPECT_EQ(d.reg.EvictIdle(3600, 10), 0);

  EXPECT_EQ(d.reg.EvictIdle(1e-9, 10), 1);
  EXPECT_TRUE(m->evicted());
  EXPECT_EQ(FilesIn(dir.sub("evicted")), 1u);
  EXPECT_EQ(d.reg.committed_bytes(), 0);  // its charge is released
  EXPECT_EQ(d.reg.ledger().models(), 0);
  EXPECT_EQ(Series(d.metrics, "cmestream_models", "state", "evicted"), 1);
  EXPECT_EQ(Series(d.metrics, "cmestream_models", "state", "live"), 0);
  EXPECT_EQ(Series(d.metrics, "cmestream_model_evictions_total"), 1);
  // What it answers without its learner: describe, the same view object, alarms, the digest.
  EXPECT_TRUE(m->Describe().evicted());
  EXPECT_EQ(m->Describe().samples(), 300u);
  EXPECT_EQ(m->view(), view);
  EXPECT_EQ(m->StateDigest(), digest);
  const auto kept = m->Alarms(0);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->armed_at, alarms->armed_at);
  EXPECT_EQ(kept->alarms.size(), alarms->alarms.size());
  EXPECT_EQ(kept->dropped, alarms->dropped);
  EXPECT_EQ(RefreshModel(*m), nullptr);  // no new pairs, no learner: no view built
  EXPECT_EQ(m->view(), view);
  EXPECT_TRUE(m->evicted());

  // The next batch loads it back; then it equals the twin fed the same batches.
  for (ModelRegistry* r : {&d.reg, &twin}) ASSERT_TRUE(Apply(*r, Batch("m", "p", 300, 200, 2)).ok());
  EXPECT_FALSE(m->evicted());
  EXPECT_EQ(FilesIn(dir.sub("evicted")), 0u);
  EXPECT_EQ(m->StateDigest(), (*twin.Get("m"))->StateDigest());
  EXPECT_GT(m->last_reload_seconds(), 0);
  EXPECT_EQ(Series(d.metrics, "cmestream_models", "state", "evicted"), 0);
  EXPECT_EQ(Series(d.metrics, "cmestream_models", "state", "live"), 1);
  EXPECT_EQ(Series(d.metrics, "cmestream_model_reloads_total"), 1);
  EXPECT_EQ(Series(d.metrics, "cmestream_model_reload_seconds"), 1);  // one observation
  // Charged again: what it holds, as the twin is charged (same dictionary).
  EXPECT_EQ(d.reg.ledger().models(), 1);
  EXPECT_EQ(d.reg.committed_bytes(), twin.committed_bytes());

  // Exactly-once after the reload: a re-sent batch is a duplicate (evicted again first).
  ASSERT_NE(RefreshModel(*m), nullptr);
  EXPECT_EQ(d.reg.EvictIdle(1e-9, 10), 1);
  auto again = Apply(d.reg, Batch("m", "p", 300, 200, 2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->applied, 0u);
  EXPECT_EQ(again->producer_offset, 500u);
  EXPECT_FALSE(m->evicted());  // a batch reloads, even a duplicate
  EXPECT_EQ(m->StateDigest(), (*twin.Get("m"))->StateDigest());
  // A gap is still refused after a reload.
  ASSERT_TRUE(m->EvictIfIdle(1e-9).ok());
  EXPECT_EQ(Apply(d.reg, Batch("m", "p", 900, 10, 3)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Eviction, SnapshotAndReplayOfAnEvictedModelLoseNothing) {
  TempDir dir("snapshot");
  uint64_t digest = 0;
  std::string image_before;
  {
    Daemonish d(dir);
    ASSERT_TRUE(d.reg.Create(Config("m")).ok());
    ASSERT_TRUE(d.reg.Create(Config("live")).ok());
    ASSERT_TRUE(Apply(d.reg, Batch("m", "p", 0, 300, 1)).ok());
    ASSERT_TRUE(Apply(d.reg, Batch("live", "p", 0, 100, 4)).ok());
    std::shared_ptr<Model> m = *d.reg.Get("m");
    image_before = ModelSnapshotCodec::Encode(*m).bytes;
    ASSERT_TRUE(m->EvictIfIdle(1e-9).ok());
    ASSERT_TRUE(m->evicted());
    // Its image (what an export copies) is its file's MODL object: the same bytes.
    EXPECT_EQ(ModelSnapshotCodec::Encode(*m).bytes, image_before);
    auto taken = TakeSnapshot(dir, d.reg, &d.log);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_EQ(taken->models, 2);
    EXPECT_EQ(taken->referenced, 1);
    EXPECT_TRUE(m->evicted());  // no reload for a snapshot
    // Records after the snapshot: one for the live model; the evicted one gets none.
    ASSERT_TRUE(Apply(d.reg, Batch("live", "p", 100, 50, 5)).ok());
    digest = m->StateDigest();
  }
  // Restart: the snapshot, then the WAL after it; the old eviction files are removed at open.
  Daemonish r(dir);
  // The registry was replayed from the WAL alone by Daemonish (no snapshot loaded): compare.
  std::shared_ptr<Model> replayed = *r.reg.Get("m");
  EXPECT_EQ(replayed->StateDigest(), digest);
  EXPECT_EQ(FilesIn(dir.sub("evicted")), 0u);
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry restored({}, metrics, log);  // no eviction: the referenced file is decoded
  SnapshotManager snapshots(SnapshotsOf(dir), restored, {}, nullptr);
  auto loaded = snapshots.LoadNewest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->models, 2);
  EXPECT_EQ((*restored.Get("m"))->StateDigest(), digest);
  EXPECT_EQ(ModelSnapshotCodec::Encode(**restored.Get("m")).bytes, image_before);
}

// A daemon snapshot (format 3) neither reads nor copies an evicted model's file: it pins the file
// at its cut (a hard link in the snapshot's pins directory, storage/snapshot.h PINS) and writes a
// reference to it (EREF: name, size, CRC32C, the MODL head) and the model's EVCT object. The pin
// keeps the bytes of the cut when the model is loaded back and learns on; it belongs to the
// snapshot once installed, is fsynced once (the first snapshot that references the file) and goes
// with the snapshot at retention; a part never written removes its pin.
TEST(Eviction, ASnapshotReferencesAnEvictedModelsFileInsteadOfCopyingIt) {
  TempDir dir("pin");
  Daemonish d(dir);
  std::shared_ptr<Model> m = FedModel(d);
  ASSERT_FALSE(HasFailure());
  const std::string image = ModelSnapshotCodec::Encode(*m).bytes;
  ASSERT_TRUE(m->EvictIfIdle(1e-9).ok());
  ASSERT_TRUE(m->evicted());
  const std::string file = OnlyFile(dir.sub("evicted"));
  const std::string file_bytes = ReadBytes(file);
  EXPECT_EQ(d.store->files_synced(), 0u);  // eviction does not fsync

  const std::string pins = dir.sub("pins");
  fs::create_directories(pins);
  {
    absl::StatusOr<SnapshotPart> part = ModelSnapshotCodec::Part(*m, pins);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_TRUE(part->pinned());
    EXPECT_EQ(part->name(), "m");
    EXPECT_EQ(FilesIn(pins), 1u);
    // What it records of the file: its size and its footer's CRC32C, never synced yet.
    EXPECT_EQ(part->ref().size, file_bytes.size());
    EXPECT_EQ(part->ref().crc, crc32c::Value(file_bytes.data(), file_bytes.size() - 4));
    EXPECT_FALSE(part->ref().durable);
    // Loaded back and fed after the cut: its file goes, the pin keeps the cut's bytes.
    ASSERT_TRUE(Apply(d.reg, Batch("m", "p", 300, 50, 2)).ok());
    EXPECT_FALSE(m->evicted());
    EXPECT_EQ(FilesIn(dir.sub("evicted")), 0u);
    EXPECT_EQ(ReadBytes(OnlyFile(pins)), file_bytes);
    // Its entry: the reference, then what the evicted model keeps in memory (its EVCT object).
    const std::string summary = part->summary();
    EXPECT_EQ(summary.substr(0, 4), "EVCT");
    const std::string entry = part->TakeBytes();
    EXPECT_EQ(entry.substr(0, 4), "EREF");
    EXPECT_EQ(entry.substr(entry.size() - summary.size()), summary);
    EXPECT_LT(entry.size(), 2000u);  // measured 1,129 bytes, for a 1.2 MB file
    EXPECT_NE(entry.find("000000000001.modl"), std::string::npos);
  }
  EXPECT_EQ(FilesIn(pins), 0u);  // never installed: the part removed its pin

  // A resident model's part is its bytes, no file.
  absl::StatusOr<SnapshotPart> resident = ModelSnapshotCodec::Part(*m, pins);
  ASSERT_TRUE(resident.ok());
  EXPECT_FALSE(resident->pinned());
  EXPECT_TRUE(resident->summary().empty());
  EXPECT_EQ(resident->TakeBytes(), ModelSnapshotCodec::Encode(*m).bytes);

  // Snapshots of an evicted model and a resident one: the file is referenced, not copied, and
  // fsynced by the first snapshot only; each kept snapshot owns one pin (a hard link: the file's
  // link count is 1 + the kept snapshots), and retention removes the oldest one's with it.
  ASSERT_TRUE(d.reg.Create(Config("live")).ok());
  ASSERT_TRUE(Apply(d.reg, Batch("live", "p", 0, 300, 3)).ok());
  ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
  ASSERT_TRUE(m->evicted());
  const std::string evicted = OnlyFile(dir.sub("evicted"));
  const uint64_t evicted_size = fs::file_size(evicted);
  const std::string resident_image = ModelSnapshotCodec::Encode(**d.reg.Get("live")).bytes;
  std::vector<SnapshotResult> taken;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<SnapshotResult> r = TakeSnapshot(dir, d.reg, &d.log);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->models, 2);
    EXPECT_EQ(r->referenced, 1);
    EXPECT_EQ(r->files_synced, i == 0 ? 1 : 0);
    // The resident model's bytes and a small entry for the evicted one, not its 1.2 MB.
    EXPECT_LT(r->bytes, resident_image.size() + 2000) << r->bytes;
    EXPECT_GT(r->bytes, resident_image.size());
    EXPECT_TRUE(fs::exists(PinsDirOf(r->path)));
    taken.push_back(*r);
    EXPECT_EQ(fs::hard_link_count(evicted), 1u + std::min(i + 1, 2));
  }
  EXPECT_GT(evicted_size, 1000000u);
  EXPECT_EQ(d.store->files_synced(), 1u);
  EXPECT_FALSE(fs::exists(taken[0].path));
  EXPECT_FALSE(fs::exists(PinsDirOf(taken[0].path)));  // retention removed its pins with it
  for (int i : {1, 2}) EXPECT_EQ(FilesIn(PinsDirOf(taken[i].path)), 1u);
  // The model is loaded back: the kept snapshots' pins keep its evicted state.
  ASSERT_TRUE(Apply(d.reg, Batch("m", "p", 350, 20, 4)).ok());
  EXPECT_FALSE(m->evicted());
  EXPECT_EQ(ReadBytes(OnlyFile(PinsDirOf(taken[2].path))).size(), evicted_size);

  // A referenced file whose size changed fails the snapshot's verification by the model, installs
  // nothing and leaves no pin; the previous snapshots are untouched.
  ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
  const std::string again = OnlyFile(dir.sub("evicted"));
  std::string truncated = ReadBytes(again);
  truncated.resize(truncated.size() - 100);
  WriteBytes(again, truncated);
  absl::StatusOr<SnapshotResult> failed = TakeSnapshot(dir, d.reg, &d.log);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("(a reference) does not check"), std::string::npos) << failed.status();
  EXPECT_NE(failed.status().message().find("its reference says"), std::string::npos) << failed.status();
  SnapshotManager snapshots(SnapshotsOf(dir), d.reg, {}, &d.log);
  EXPECT_EQ(snapshots.List(), (std::vector<std::string>{taken[1].path, taken[2].path}));
  const auto entries = std::distance(fs::directory_iterator(dir.sub("snapshots")), fs::directory_iterator());
  EXPECT_EQ(entries, 4);  // two snapshots and their pins directories: no temporary file, no pins left
  EXPECT_TRUE(m->evicted());
}

// A pins directory whose snapshot is gone (a crash after the pins were made and before the
// snapshot's rename, or between the removal of a snapshot and of its pins) is removed when the
// manager is built; the pins of a present snapshot, and other entries, are kept.
TEST(Eviction, PinsWithoutTheirSnapshotAreRemovedAtStart) {
  TempDir dir("stray");
  Daemonish d(dir);
  std::shared_ptr<Model> m = FedModel(d);
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
  absl::StatusOr<SnapshotResult> kept = TakeSnapshot(dir, d.reg, &d.log);
  ASSERT_TRUE(kept.ok()) << kept.status();
  const std::string stray = dir.sub("snapshots/snapshot-00000000000000000007.pins");
  fs::create_directories(stray);
  fs::create_hard_link(OnlyFile(dir.sub("evicted")), stray + "/000000000001.modl");
  const std::string other = dir.sub("snapshots/notes.pins");
  fs::create_directories(other);
  EXPECT_EQ(fs::hard_link_count(OnlyFile(dir.sub("evicted"))), 3u);
  SnapshotManager snapshots(SnapshotsOf(dir), d.reg, {}, &d.log);
  EXPECT_FALSE(fs::exists(stray));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(FilesIn(PinsDirOf(kept->path)), 1u);
  EXPECT_EQ(fs::hard_link_count(OnlyFile(dir.sub("evicted"))), 2u);
  // The next snapshot takes number 2, not the stray one's.
  absl::StatusOr<SnapshotResult> next = snapshots.TakeNow();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->number, 2u);
}

// A daemon restarted on `dir` as cmestreamd does (Daemon::Recover): the eviction store (its old
// files removed), the newest snapshot, then the WAL after it.
struct Restarted {
  explicit Restarted(const TempDir& dir) : reg({}, metrics, log) {
    auto s = EvictionStore::Open(dir.sub("evicted"), {});
    EXPECT_TRUE(s.ok()) << s.status();
    store = *std::move(s);
    reg.SetSpill(store.get());
    SnapshotManager snapshots(SnapshotsOf(dir), reg, {}, nullptr);
    auto loaded = snapshots.LoadNewest();
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    models = loaded.ok() ? loaded->models : -1;
    WalOptions o;
    o.dir = dir.sub("wal");
    o.sync = WalSync::kNever;
    auto opened = OpenAndReplayWal(o, loaded.ok() ? loaded->covered_sequence : 0, reg, nullptr, nullptr, nullptr);
    EXPECT_TRUE(opened.ok()) << opened.status();
    wal = *std::move(opened);
    log.Install(wal.get());
  }
  std::unique_ptr<EvictionStore> store;
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg;
  std::unique_ptr<Wal> wal;
  int models = 0;
};

// RESTART (model.h EVICTION): a model evicted when the snapshot was taken comes back evicted,
// its learner in the snapshot's pinned file (a new hard link under evicted/: no byte read or
// written), with its digest, offsets, counters and alarms, and no view; the next batch loads it
// back and it learns on as a twin that never left. A model with a batch in the log after the
// snapshot is loaded back by the replay of that batch. Restarted twice, it is the same file.
TEST(Eviction, RestartBringsModelsEvictedAtTheSnapshotBackEvicted) {
  TempDir dir("restart");
  Twin twin_parts;  // never evicted, never restarted
  ModelRegistry& twin = twin_parts.reg;
  uint64_t digest_m = 0;
  Model::Stats stats_m;
  Model::AlarmList alarms_m;
  std::string image_m;
  {
    Daemonish d(dir);
    for (const char* name : {"m", "r", "live"}) ASSERT_NO_FATAL_FAILURE(CreateAndFeed({&d.reg, &twin}, name));
    for (const char* name : {"m", "r"}) {
      std::shared_ptr<Model> m = *d.reg.Get(name);
      ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
      ASSERT_TRUE(m->evicted());
    }
    std::shared_ptr<Model> m = *d.reg.Get("m");
    digest_m = m->StateDigest();
    stats_m = m->stats();
    auto alarms = m->Alarms(0);
    ASSERT_TRUE(alarms.ok()) << alarms.status();
    alarms_m = *alarms;
    ASSERT_GT(alarms_m.armed_at, 0);  // the alarms survive with something to compare
    absl::StatusOr<ModelImage> image = ModelSnapshotCodec::Image(*m);
    ASSERT_TRUE(image.ok());
    image_m = image->bytes;
    auto taken = TakeSnapshot(dir, d.reg, &d.log);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_EQ(taken->referenced, 2);
    EXPECT_EQ(taken->files_synced, 2);
    // After the snapshot: a batch of the evicted "r" (it is loaded back) and of "live".
    for (ModelRegistry* r : {&d.reg, &twin}) {
      ASSERT_TRUE(Apply(*r, Batch("r", "p", 300, 40, 5)).ok());
      ASSERT_TRUE(Apply(*r, Batch("live", "p", 300, 40, 6)).ok());
    }
    EXPECT_TRUE(m->evicted());
  }

  {
    Restarted a(dir);
    EXPECT_EQ(a.models, 3);
    EXPECT_EQ(a.store->bytes_written(), 0u);  // nothing written back: the pinned files are linked
    std::shared_ptr<Model> m = *a.reg.Get("m");
    EXPECT_TRUE(m->evicted());
    EXPECT_EQ(m->view(), nullptr);
    EXPECT_TRUE(m->awaiting_view());             // a view query answers UNAVAILABLE and asks for one
    EXPECT_EQ(FilesIn(dir.sub("evicted")), 1u);  // m's; r's went when its replayed batch loaded it back
    // What it answers without its learner: the state before the stop.
    EXPECT_EQ(m->StateDigest(), digest_m);
    EXPECT_EQ(m->StateDigest(), (*twin.Get("m"))->StateDigest());
    EXPECT_EQ(m->ProducerOffset("p"), 300u);
    const Model::Stats st = m->stats();
    EXPECT_EQ(st.samples, stats_m.samples);
    EXPECT_EQ(st.pending_warmup, stats_m.pending_warmup);
    EXPECT_EQ(st.dict_x, stats_m.dict_x);
    EXPECT_EQ(st.batches_applied, stats_m.batches_applied);
    EXPECT_EQ(st.alarms_total, stats_m.alarms_total);
    EXPECT_EQ(st.armed_at, stats_m.armed_at);
    EXPECT_EQ(st.change_score, stats_m.change_score);
    const v1::ModelInfo info = m->Describe();
    EXPECT_TRUE(info.evicted());
    EXPECT_EQ(info.samples(), stats_m.samples);
    auto alarms = m->Alarms(0);
    ASSERT_TRUE(alarms.ok()) << alarms.status();
    EXPECT_EQ(alarms->armed_at, alarms_m.armed_at);
    EXPECT_EQ(alarms->dropped, alarms_m.dropped);
    ASSERT_EQ(alarms->alarms.size(), alarms_m.alarms.size());
    for (size_t i = 0; i < alarms_m.alarms.size(); ++i) {
      EXPECT_EQ(alarms->alarms[i].index, alarms_m.alarms[i].index);
      EXPECT_EQ(alarms->alarms[i].score, alarms_m.alarms[i].score);
      EXPECT_EQ(alarms->alarms[i].channels, alarms_m.alarms[i].channels);
    }
    // Its file holds the MODL object it had: a snapshot or export copies the same bytes.
    absl::StatusOr<ModelImage> image = ModelSnapshotCodec::Image(*m);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->bytes, image_m);
    // Not charged until loaded back; counted as evicted (not as an eviction).
    EXPECT_EQ(a.reg.ledger().models(), 2);
    EXPECT_EQ(Series(a.metrics, "cmestream_models", "state", "evicted"), 1);
    EXPECT_EQ(Series(a.metrics, "cmestream_models", "state", "live"), 2);
    EXPECT_EQ(Series(a.metrics, "cmestream_model_evictions_total"), 0);
    // The replayed batch loaded "r" back; both it and "live" equal their twins.
    for (const char* name : {"r", "live"}) {
      EXPECT_FALSE((*a.reg.Get(name))->evicted()) << name;
      EXPECT_EQ((*a.reg.Get(name))->StateDigest(), (*twin.Get(name))->StateDigest()) << name;
      EXPECT_EQ((*a.reg.Get(name))->ProducerOffset("p"), 340u) << name;
    }
    // No view, no learner: a refresh builds nothing (the scheduler loads it back on request).
    EXPECT_EQ(RefreshModel(*m), nullptr);
    EXPECT_TRUE(m->evicted());
    // A snapshot of the restarted daemon keeps it evicted, referencing the same file, already
    // durable (the next start below restores it from this snapshot).
    auto taken = TakeSnapshot(dir, a.reg, &a.log);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_EQ(taken->models, 3);
    EXPECT_EQ(taken->referenced, 1);
    EXPECT_EQ(taken->files_synced, 0);
    EXPECT_TRUE(m->evicted());
    EXPECT_EQ(FilesIn(dir.sub("evicted")), 1u);
    // One inode since its eviction: its file, and a pin of each kept snapshot.
    EXPECT_EQ(fs::hard_link_count(OnlyFile(dir.sub("evicted"))), 3u);
  }

  // The next start adopts the same file again; its batch loads it back as the twin's state.
  Restarted b(dir);
  EXPECT_EQ(b.store->bytes_written(), 0u);
  std::shared_ptr<Model> m = *b.reg.Get("m");
  EXPECT_TRUE(m->evicted());
  EXPECT_EQ(m->StateDigest(), digest_m);
  for (ModelRegistry* r : {&b.reg, &twin}) ASSERT_TRUE(Apply(*r, Batch("m", "p", 300, 40, 7)).ok());
  EXPECT_FALSE(m->evicted());
  EXPECT_TRUE(m->awaiting_view());  // loaded back, no view built yet
  ASSERT_NE(RefreshModel(*m), nullptr);
  EXPECT_FALSE(m->awaiting_view());
  EXPECT_EQ(m->StateDigest(), (*twin.Get("m"))->StateDigest());
  EXPECT_EQ(b.reg.ledger().models(), 3);
  EXPECT_EQ(Series(b.metrics, "cmestream_models", "state", "evicted"), 0);
  // Exactly-once across it all: the batch again is a duplicate.
  auto again = Apply(b.reg, Batch("m", "p", 300, 40, 7));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->applied, 0u);
  EXPECT_EQ(again->producer_offset, 340u);
}

// A damaged referenced file (one inode: the model's file and every kept snapshot's pin) refuses
// the reload with DATA_LOSS, nothing logged or applied, and says that a restart cannot recover
// it: the next start still serves the model from what it keeps (digest, offsets), and refuses its
// batches the same way. A file damaged before any snapshot referenced it is recovered by a
// restart from the previous snapshot and the log. A missing pin makes its snapshot unusable: the
// start falls back to the previous one.
TEST(Eviction, ADamagedReferencedFileRefusesItsReloadAndSaysWhatARestartCanDo) {
  TempDir dir("damaged_ref");
  Twin twin_parts;
  ModelRegistry& twin = twin_parts.reg;
  uint64_t digest_m = 0;
  {
    Daemonish d(dir);
    for (const char* name : {"m", "n"}) ASSERT_NO_FATAL_FAILURE(CreateAndFeed({&d.reg, &twin}, name));
    std::shared_ptr<Model> m = *d.reg.Get("m");
    ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
    digest_m = m->StateDigest();
    ASSERT_TRUE(TakeSnapshot(dir, d.reg, &d.log).ok());
    // "n" is evicted after the snapshot: its file is referenced by none.
    std::shared_ptr<Model> n = *d.reg.Get("n");
    ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*n));
    for (const auto& e : fs::directory_iterator(dir.sub("evicted"))) {
      std::string bytes = ReadBytes(e.path().string());
      bytes[bytes.size() / 2] ^= 0x04;
      WriteBytes(e.path().string(), bytes);
    }
    const uint64_t last = d.wal->last_sequence();
    auto refused = Apply(d.reg, Batch("m", "p", 300, 40, 7));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(refused.status().message().find("cannot be loaded back"), std::string::npos) << refused.status();
    EXPECT_NE(refused.status().message().find("checksum mismatch"), std::string::npos) << refused.status();
    EXPECT_NE(refused.status().message().find("a restart cannot recover it"), std::string::npos) << refused.status();
    auto refused_n = Apply(d.reg, Batch("n", "p", 300, 40, 8));
    ASSERT_FALSE(refused_n.ok());
    EXPECT_EQ(refused_n.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(refused_n.status().message().find("restart the daemon to recover the model"), std::string::npos)
        << refused_n.status();
    EXPECT_TRUE(m->evicted());
    EXPECT_EQ(m->ProducerOffset("p"), 300u);
    EXPECT_EQ(d.wal->last_sequence(), last);
  }
  {
    Restarted a(dir);
    EXPECT_EQ(a.models, 2);
    // "n": from the snapshot (resident then) and the log: its twin's state.
    std::shared_ptr<Model> n = *a.reg.Get("n");
    EXPECT_FALSE(n->evicted());
    EXPECT_EQ(n->StateDigest(), (*twin.Get("n"))->StateDigest());
    for (ModelRegistry* r : {&a.reg, &twin}) ASSERT_TRUE(Apply(*r, Batch("n", "p", 300, 40, 8)).ok());
    EXPECT_EQ(n->StateDigest(), (*twin.Get("n"))->StateDigest());
    // "m": restored evicted from the damaged file (size and footer unchanged), answers what it
    // keeps, and refuses its batches, saying so.
    std::shared_ptr<Model> m = *a.reg.Get("m");
    EXPECT_TRUE(m->evicted());
    EXPECT_EQ(m->StateDigest(), digest_m);
    EXPECT_EQ(m->ProducerOffset("p"), 300u);
    auto refused = Apply(a.reg, Batch("m", "p", 300, 40, 7));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(refused.status().message().find("a restart cannot recover it"), std::string::npos) << refused.status();
    // A second snapshot, then the newest one's pin removed: unusable, the start falls back.
    ASSERT_TRUE(TakeSnapshot(dir, a.reg, &a.log).ok());
  }
  SnapshotManager snapshots(SnapshotsOf(dir), twin, {}, nullptr);
  const std::vector<std::string> kept = snapshots.List();
  ASSERT_EQ(kept.size(), 2u);
  fs::remove(OnlyFile(PinsDirOf(kept[1])));
  auto probe_store = EvictionStore::Open(dir.sub("probe_evicted"), {});  // outlives the registry's models
  ASSERT_TRUE(probe_store.ok()) << probe_store.status();
  Metrics probe_metrics;
  DeferredBatchLog probe_log;
  ModelRegistry probe_reg({}, probe_metrics, probe_log);
  probe_reg.SetSpill(probe_store->get());  // evicting: the damaged file is adopted, not decoded
  SnapshotManager loader(SnapshotsOf(dir), probe_reg, {}, nullptr);
  auto report = loader.LoadNewest();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->path, kept[0]);
  ASSERT_EQ(report->unusable, std::vector<std::string>{kept[1]});
  EXPECT_NE(report->skipped[0].find("cannot be opened"), std::string::npos) << report->skipped[0];
  // Set aside, its pins go with it.
  ASSERT_TRUE(loader.SetAside(report->unusable).ok());
  const std::string aside = dir.sub("snapshots/unusable/") + fs::path(kept[1]).filename().string();
  EXPECT_TRUE(fs::exists(aside));
  EXPECT_TRUE(fs::exists(PinsDirOf(aside)));
  EXPECT_FALSE(fs::exists(PinsDirOf(kept[1])));
  Restarted b(dir);
  EXPECT_EQ(b.models, 2);
  EXPECT_EQ((*b.reg.Get("n"))->StateDigest(), (*twin.Get("n"))->StateDigest());
  EXPECT_TRUE((*b.reg.Get("m"))->evicted());
}

// The EREF and EVCT objects of an evicted model (snapshot format 3) are framed by both readers at
// the same place, a reader that takes only model objects refuses the reference by name, and an
// EVCT or EREF object of an unknown version (the checksum recomputed: not damage) makes the
// snapshot unusable by name.
TEST(Eviction, TheReferenceAndEvictedObjectsOfASnapshotAreFramedAndTheirVersionsChecked) {
  for (const char* edited : {"EVCT", "EREF"}) {
    TempDir dir(std::string("evct_") + edited);
    std::string path;
    {
      Daemonish d(dir);
      std::shared_ptr<Model> m = FedModel(d);
      ASSERT_FALSE(HasFailure());
      ASSERT_TRUE(d.reg.Create(Config("live")).ok());
      ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
      auto taken = TakeSnapshot(dir, d.reg, &d.log);
      ASSERT_TRUE(taken.ok()) << taken.status();
      path = taken->path;
    }
    absl::StatusOr<SnapshotFile> whole = ReadSnapshotFile(path);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(whole->format_version, 3u);
    ASSERT_EQ(whole->summary_ranges.size(), 2u);
    ASSERT_EQ(whole->reference_ranges.size(), 2u);
    // "live" (created second, listed by name) is a MODL object; "m" a reference, then its EVCT.
    EXPECT_EQ(whole->summary_ranges[0], (std::pair<uint64_t, uint64_t>{0, 0}));
    EXPECT_EQ(whole->reference_ranges[0], (std::pair<uint64_t, uint64_t>{0, 0}));
    EXPECT_EQ(whole->model_ranges[1], (std::pair<uint64_t, uint64_t>{0, 0}));
    const auto [ref_begin, ref_end] = whole->reference_ranges[1];
    EXPECT_EQ(ref_begin, whole->model_ranges[0].second);
    EXPECT_EQ(whole->bytes.substr(ref_begin, 4), "EREF");
    const auto [begin, end] = whole->summary_ranges[1];
    EXPECT_EQ(begin, ref_end);
    EXPECT_EQ(whole->bytes.substr(begin, 4), "EVCT");
    EXPECT_EQ(end + 4, whole->bytes.size());
    {
      auto reader = SnapshotFileReader::Open(path);
      ASSERT_TRUE(reader.ok());
      std::string object, summary, reference;
      uint64_t at = 0;
      ASSERT_TRUE(*(*reader)->Next(&object, &at, &summary, &reference));
      EXPECT_TRUE(summary.empty());
      EXPECT_TRUE(reference.empty());
      ASSERT_TRUE(*(*reader)->Next(&object, &at, &summary, &reference));
      EXPECT_TRUE(object.empty());
      EXPECT_EQ(at, ref_begin);
      EXPECT_EQ(reference, whole->bytes.substr(ref_begin, ref_end - ref_begin));
      EXPECT_EQ(summary, whole->bytes.substr(begin, end - begin));
      EXPECT_FALSE(*(*reader)->Next(&object, &at, &summary, &reference));
      auto plain = SnapshotFileReader::Open(path);
      ASSERT_TRUE(plain.ok());
      ASSERT_TRUE(*(*plain)->Next(&object, &at));
      absl::StatusOr<bool> refused = (*plain)->Next(&object, &at);
      ASSERT_FALSE(refused.ok());
      EXPECT_NE(refused.status().message().find("an evicted model reference (EREF) where this reader takes only"),
                std::string::npos)
          << refused.status();
    }

    std::string bytes = whole->bytes.substr(0, whole->bytes.size() - 4);
    bytes[(std::string(edited) == "EVCT" ? begin : ref_begin) + 4] = 2;  // version 2
    const uint32_t crc = crc32c::Mask(crc32c::Value(bytes.data(), bytes.size()));
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    WriteBytes(path, bytes);
    Restarted r(dir);
    EXPECT_EQ(r.models, 0);  // the only snapshot is unusable: the log alone restores (below)
    EXPECT_EQ(r.reg.List().size(), 2u);
    absl::StatusOr<SnapshotFile> refused = ReadSnapshotFile(path);
    ASSERT_FALSE(refused.ok());
    const std::string expected = std::string(edited) == "EVCT"
                                     ? "evicted model (EVCT) version 2 is not supported by this build (reads 1..1)"
                                     : "evicted model reference (EREF) version 2 is not supported by this build "
                                       "(reads 1..1)";
    EXPECT_NE(refused.status().message().find(expected), std::string::npos) << refused.status();
  }
}

// Snapshot format 2 (an evicted model's MODL object copied, then its EVCT object) still loads: the
// model comes back evicted, its file written back from the snapshot's bytes, and its next batch
// loads it back as a twin's state. The file is built from a format 3 snapshot's parts: its header
// (version 2), the resident model's MODL object, the evicted model's MODL object (its pinned
// file's) and its EVCT object.
TEST(Eviction, AFormat2SnapshotStillLoads) {
  TempDir dir("format2");
  Twin twin_parts;
  ModelRegistry& twin = twin_parts.reg;
  uint64_t digest = 0;
  std::string path;
  uint64_t file_size = 0;
  {
    Daemonish d(dir);
    for (const char* name : {"m", "live"}) ASSERT_NO_FATAL_FAILURE(CreateAndFeed({&d.reg, &twin}, name));
    std::shared_ptr<Model> m = *d.reg.Get("m");
    ASSERT_NO_FATAL_FAILURE(RefreshAndEvict(*m));
    digest = m->StateDigest();
    auto taken = TakeSnapshot(dir, d.reg, &d.log);
    ASSERT_TRUE(taken.ok()) << taken.status();
    path = taken->path;
    file_size = fs::file_size(OnlyFile(PinsDirOf(path)));
  }
  absl::StatusOr<SnapshotFile> v3 = ReadSnapshotFile(path);
  ASSERT_TRUE(v3.ok()) << v3.status();
  absl::StatusOr<SnapshotFile> pinned = ReadSnapshotFile(OnlyFile(PinsDirOf(path)));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  const auto range = [](const SnapshotFile& f, std::pair<uint64_t, uint64_t> r) {
    return f.bytes.substr(r.first, r.second - r.first);
  };
  std::string v2 = v3->bytes.substr(0, 44);
  v2[12] = 2;                                     // format version 2
  v2 += range(*v3, v3->model_ranges[0]);          // "live"
  v2 += range(*pinned, pinned->model_ranges[0]);  // "m": its MODL object copied
  v2 += range(*v3, v3->summary_ranges[1]);        // and its EVCT object
  const uint32_t crc = crc32c::Mask(crc32c::Value(v2.data(), v2.size()));
  for (int i = 0; i < 4; ++i) v2.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  fs::remove_all(PinsDirOf(path));
  WriteBytes(path, v2);
  absl::StatusOr<SnapshotFile> parsed = ReadSnapshotFile(path);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->format_version, 2u);

  Restarted r(dir);
  EXPECT_EQ(r.models, 2);
  std::shared_ptr<Model> m = *r.reg.Get("m");
  EXPECT_TRUE(m->evicted());
  EXPECT_EQ(m->StateDigest(), digest);
  EXPECT_EQ(r.store->bytes_written(), file_size);  // its file written back from the snapshot's bytes
  for (ModelRegistry* reg : {&r.reg, &twin}) ASSERT_TRUE(Apply(*reg, Batch("m", "p", 300, 40, 7)).ok());
  EXPECT_FALSE(m->evicted());
  EXPECT_EQ(m->StateDigest(), (*twin.Get("m"))->StateDigest());
  EXPECT_EQ((*r.reg.Get("live"))->StateDigest(), (*twin.Get("live"))->StateDigest());
}

TEST(Eviction, ExportAndDeleteOfAnEvictedModel) {
  TempDir dir("export");
  Daemonish d(dir);
  std::shared_ptr<Model> m = FedModel(d);
  ASSERT_FALSE(HasFailure());
  const uint64_t digest = m->StateDigest();
  const absl::StatusOr<std::string> resident_export = ExportModel(*m);
  ASSERT_TRUE(resident_export.ok());
  ASSERT_TRUE(m->EvictIfIdle(1e-9).ok());
  ASSERT_TRUE(m->evicted());
  // Exported from its file, without a reload; imported elsewhere it is the same state.
  absl::StatusOr<std::string> exported = ExportModel(*m);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_TRUE(m->evicted());
  EXPECT_EQ(exported->size(), resident_export->size());
  Metrics other_metrics;
  NullBatchLog other_log;
  ModelRegistry other({}, other_metrics, other_log);
  auto imported = ImportModel(*exported, "copy", other, {});
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ((*imported)->StateDigest(), digest);

  // Deleted while evicted: its count and charge go; its file goes with the last holder.
  ASSERT_TRUE(d.reg.Delete("m").ok());
  EXPECT_EQ(Series(d.metrics, "cmestream_models", "state", "evicted"), 0);
  EXPECT_EQ(Series(d.metrics, "cmestream_models", "state", "live"), 0);
  EXPECT_EQ(d.reg.ledger().models(), 0);
  EXPECT_EQ(d.reg.committed_bytes(), 0);
  EXPECT_EQ(FilesIn(dir.sub("evicted")), 1u);  // `m` still holds the object
  EXPECT_EQ(m->EnsureResident().code(), absl::StatusCode::kNotFound);
  m.reset();
  EXPECT_EQ(FilesIn(dir.sub("evicted")), 0u);
  // The name can be used again, and the new model starts empty.
  ASSERT_TRUE(d.reg.Create(Config("m")).ok());
  EXPECT_EQ((*d.reg.Get("m"))->stats().samples, 0u);
}

TEST(Eviction, DamagedFileRefusesTheReloadAndChangesNothing) {
  TempDir dir("damaged");
  Daemonish d(dir);
  std::shared_ptr<Model> m = FedModel(d);
  ASSERT_FALSE(HasFailure());
  const uint64_t digest = m->StateDigest();
  ASSERT_TRUE(m->EvictIfIdle(1e-9).ok());
  ASSERT_EQ(FilesIn(dir.sub("evicted")), 1u);
  const std::string path = fs::directory_iterator(dir.sub("evicted"))->path().string();
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::string good = bytes;
  bytes[bytes.size() / 2] ^= 0x10;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto refused = Apply(d.reg, Batch("m", "p", 300, 10, 2));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("cannot be loaded back"), std::string::npos) << refused.status();
  EXPECT_TRUE(m->evicted());
  EXPECT_EQ(m->ProducerOffset("p"), 300u);  // nothing of the batch was logged or applied
  EXPECT_EQ(d.wal->last_sequence(), 2u);    // its creation and first batch only
  // The file repaired, the same batch goes through.
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(good.data(), static_cast<std::streamsize>(good.size()));
  }
  ASSERT_TRUE(m->EnsureResident().ok());
  EXPECT_EQ(m->StateDigest(), digest);
  ASSERT_TRUE(Apply(d.reg, Batch("m", "p", 300, 10, 2)).ok());
}

// Reloads run at once on the ingest threads. Each decodes a throwaway model whose metric series
// must be its own: when two of them shared one label, the first to go removed (freed) the
// prometheus-cpp series under the other, and a 1,000-model fleet evicting every 30 s corrupted
// the heap within a minute (glibc: "malloc(): smallbin double linked list corrupted"). Four
// threads evict and reload four models (alarms on: their gauges are the series) 40 times each;
// every reload gives back the state evicted.
TEST(Eviction, ConcurrentReloadsOfDifferentModelsKeepTheirStates) {
  TempDir dir("concurrent");
  Daemonish d(dir);
  constexpr int kModels = 4, kRounds = 40;
  std::vector<std::shared_ptr<Model>> models;
  for (int i = 0; i < kModels; ++i) {
    v1::ModelConfig c = Config("m" + std::to_string(i));
    c.set_alarms("on");
    ASSERT_TRUE(d.reg.Create(c).ok());
    ASSERT_TRUE(Apply(d.reg, Batch(c.name(), "p", 0, 300, 10 + i)).ok());
    models.push_back(*d.reg.Get(c.name()));
  }
  std::vector<std::thread> threads;
  std::vector<int> reloads(kModels, 0), mismatches(kModels, 0);
  for (int i = 0; i < kModels; ++i) {
    threads.emplace_back([&, i] {
      Model& m = *models[static_cast<size_t>(i)];
      const uint64_t digest = m.StateDigest();
      for (int r = 0; r < kRounds; ++r) {
        absl::StatusOr<bool> evicted = m.EvictIfIdle(1e-9);
        if (!evicted.ok() || !*evicted) continue;
        if (!m.EnsureResident().ok()) continue;
        ++reloads[static_cast<size_t>(i)];
        mismatches[static_cast<size_t>(i)] += m.StateDigest() != digest;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kModels; ++i) {
    EXPECT_EQ(reloads[static_cast<size_t>(i)], kRounds) << i;
    EXPECT_EQ(mismatches[static_cast<size_t>(i)], 0) << i;
  }
  EXPECT_EQ(Series(d.metrics, "cmestream_model_reloads_total"), kModels * kRounds);
}

// An AR(1) whose coefficient changes from 0.3 to 0.95 at row 1500 (test_forks.cc's stream):
// its change alarm starts a fork.
std::vector<double> Ar1(uint64_t seed, int rows) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 1);
  std::vector<double> v(rows + 1);
  for (int t = 1; t <= rows; ++t) v[t] = (t < 1500 ? 0.3 : 0.95) * v[t - 1] + noise(rng);
  return v;
}

TEST(Eviction, AnEvictedForkIsLoadedBackByItsParentsBatch) {
  TempDir dir("fork");
  auto store = EvictionStore::Open(dir.sub("evicted"), {});
  ASSERT_TRUE(store.ok()) << store.status();
  Metrics metrics, twin_metrics;
  NullBatchLog log, twin_log;
  ModelRegistry reg({}, metrics, log), twin({}, twin_metrics, twin_log);
  reg.SetSpill(store->get());
  v1::ModelConfig c;
  c.set_name("m");
  c.set_dim(1);
  c.set_max_dict(40);
  c.set_rff_features(16);
  c.set_auto_sigma_warmup(200);
  c.set_on_change(kOnChangeFork);
  ASSERT_TRUE(reg.Create(c).ok());
  ASSERT_TRUE(twin.Create(c).ok());
  const std::vector<double> v = Ar1(7, 3000);
  const auto feed = [&](int from, int to) {
    for (int first = from; first < to; first += 97) {
      v1::IngestBatch b;
      b.set_model("m");
      b.set_producer_id("p");
      b.set_offset(first);
      for (int t = first; t <= std::min(first + 97, to); ++t) b.add_states(v[t]);
      for (ModelRegistry* r : {&reg, &twin}) ASSERT_TRUE(Apply(*r, b).ok());
    }
  };
  feed(0, 2522);
  std::vector<std::shared_ptr<Model>> forks;
  for (const auto& m : reg.List()) {
    if (IsFork(m->config())) forks.push_back(m);
  }
  ASSERT_GE(forks.size(), 1u);  // the change at row 1500 raised an alarm
  for (const auto& f : forks) {
    ASSERT_TRUE(f->EvictIfIdle(1e-9).ok());
    ASSERT_TRUE(f->evicted()) << f->name();
  }
  feed(2522, 3000);  // the current fork's share loads it back
  int reloaded = 0;
  for (const auto& f : forks) {
    reloaded += f->evicted() ? 0 : 1;
    auto t = twin.Get(f->name());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(f->StateDigest(), (*t)->StateDigest()) << f->name();
    EXPECT_EQ(f->stats().samples, (*t)->stats().samples) << f->name();
  }
  EXPECT_GE(reloaded, 1);
  EXPECT_EQ(reg.List().size(), twin.List().size());
}

TEST(Eviction, FlagsAndTheirChecks) {
  auto defaults = ParseFlags({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->options.evict_idle_seconds, 600);
  EXPECT_EQ(defaults->options.metrics_per_model.mode, PerModelSeries::Mode::kAll);
  auto set = ParseFlags({"--evict-idle-seconds", "0", "--metrics-per-model=none"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->options.evict_idle_seconds, 0);
  EXPECT_EQ(set->options.metrics_per_model.mode, PerModelSeries::Mode::kNone);
  auto top = ParseFlags({"--metrics-per-model", "top-10"});
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->options.metrics_per_model.mode, PerModelSeries::Mode::kTop);
  EXPECT_EQ(top->options.metrics_per_model.top, 10);
  EXPECT_EQ(top->options.metrics_per_model.ToString(), "top-10");
  for (const char* wrong : {"top-0", "top-", "top-x", "top10", "some", "top-1000001"}) {
    auto bad = ParseFlags({"--metrics-per-model", wrong});
    ASSERT_FALSE(bad.ok()) << wrong;
    EXPECT_NE(bad.status().message().find("expected all, none or top-N"), std::string::npos) << bad.status();
  }
  DaemonOptions o;
  o.evict_idle_seconds = -1;
  EXPECT_NE(o.Validate().message().find("--evict-idle-seconds is -1"), std::string::npos) << o.Validate();
}

}  // namespace
}  // namespace cmestream::service
