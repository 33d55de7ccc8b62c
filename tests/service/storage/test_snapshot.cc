// Snapshots in-process (service/storage/snapshot.h): a model restored from a snapshot or moved by
// export/import continues bit-identically (compared through its serialized bytes); a corrupt
// newest snapshot is reported by path and the previous one is used; import refuses a taken
// name (ALREADY_EXISTS) and a corrupt file (DATA_LOSS).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "service/engine/batch_log.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/storage/crc32c.h"
#include "service/storage/snapshot.h"
#include "service/storage/spool_file.h"
#include "tests/service/storage/snapshot_test_support.h"

namespace cmestream::service {
namespace {

class SnapshotTest : public SnapshotTestBase {};

TEST_F(SnapshotTest, RestoredModelContinuesBitIdentically) {
  ModelRegistry a(defaults_, metrics_a_, log_);
  std::shared_ptr<Model> ma = *a.Create(Config("m"));
  Apply(*ma, Batch(301, 1, "m"));  // past the σ warm-up (100), mid RFF batch
  SnapshotManager sa({dir_.string(), 0, 2}, a, defaults_, nullptr);
  absl::StatusOr<SnapshotResult> taken = sa.TakeNow();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->models, 1);

  ModelRegistry b(defaults_, metrics_b_, log_);
  SnapshotManager sb({dir_.string(), 0, 2}, b, defaults_, nullptr);
  absl::StatusOr<LoadReport> loaded = sb.LoadNewest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, taken->path);
  std::shared_ptr<Model> mb = *b.Get("m");
  EXPECT_EQ(mb->ProducerOffset("p"), ma->ProducerOffset("p"));
  EXPECT_EQ(ModelSnapshotCodec::Encode(*ma).bytes, ModelSnapshotCodec::Encode(*mb).bytes);
  v1::IngestBatch more = Batch(257, 2, "m");
  more.set_offset(300);
  for (Model* m : {ma.get(), mb.get()}) {
    BatchCheck check = ValidateBatch(more, 2, 1);
    ASSERT_TRUE(m->Ingest(check.batch, "p", 300, 1).ok());
  }
  EXPECT_EQ(ModelSnapshotCodec::Encode(*ma).bytes, ModelSnapshotCodec::Encode(*mb).bytes);
  EXPECT_EQ(mb->stats().samples, 556u);
}

TEST_F(SnapshotTest, CorruptNewestFallsBackToPreviousAndKeepsTwo) {
  ModelRegistry a(defaults_, metrics_a_, log_);
  std::shared_ptr<Model> ma = *a.Create(Config("m"));
  SnapshotManager sa({dir_.string(), 0, 2}, a, defaults_, nullptr);
  Apply(*ma, Batch(150, 1, "m"));
  ASSERT_TRUE(sa.TakeNow().ok());
  ASSERT_TRUE(sa.TakeNow().ok());
  absl::StatusOr<SnapshotResult> third = sa.TakeNow();
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(sa.List().size(), 2u);
  {  // flip one byte in the middle of the newest
    std::fstream f(third->path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(third->bytes / 2));
    f.put('\x5a');
  }
  absl::StatusOr<SnapshotFile> bad = ReadSnapshotFile(third->path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(third->path + ": checksum mismatch"), std::string::npos) << bad.status();
  ModelRegistry b(defaults_, metrics_b_, log_);
  SnapshotManager sb({dir_.string(), 0, 2}, b, defaults_, nullptr);
  absl::StatusOr<LoadReport> loaded = sb.LoadNewest();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->path, sa.List().front());
  ASSERT_EQ(loaded->skipped.size(), 1u);
  EXPECT_EQ(loaded->skipped[0].rfind(third->path, 0), 0u);
  EXPECT_EQ(ModelSnapshotCodec::Encode(*ma).bytes, ModelSnapshotCodec::Encode(**b.Get("m")).bytes);
}

// The model-by-model reader (SnapshotFileReader: recovery's load, the verification, retention)
// frames the same objects at the same offsets as the whole-file parser, and refuses what it
// refuses with the same message: a flipped byte, a truncated file, a header whose model count
// (checksum recomputed) claims more models than the file holds or fewer.
TEST_F(SnapshotTest, ModelByModelReaderAgreesWithTheWholeFileParser) {
  ModelRegistry a(defaults_, metrics_a_, log_);
  for (const char* name : {"a", "b", "c"}) Apply(**a.Create(Config(name)), Batch(120, name[0], name));
  SnapshotManager sa({dir_.string(), 0, 2}, a, defaults_, nullptr);
  absl::StatusOr<SnapshotResult> taken = sa.TakeNow();
  ASSERT_TRUE(taken.ok()) << taken.status();
  absl::StatusOr<SnapshotFile> whole = ReadSnapshotFile(taken->path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->model_ranges.size(), 3u);
  auto reader = SnapshotFileReader::Open(taken->path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->models(), 3u);
  EXPECT_EQ((*reader)->header().number, whole->number);
  EXPECT_EQ((*reader)->header().covered_sequence, whole->covered_sequence);
  EXPECT_EQ((*reader)->header().created_unix_nanos, whole->created_unix_nanos);
  EXPECT_FALSE((*reader)->header().is_export);
  std::string object;
  uint64_t begin = 0;
  for (const auto& [b, e] : whole->model_ranges) {
    absl::StatusOr<bool> more = (*reader)->Next(&object, &begin);
    ASSERT_TRUE(more.ok() && *more) << more.status();
    EXPECT_EQ(begin, b);
    EXPECT_EQ(object, whole->bytes.substr(b, e - b));
  }
  absl::StatusOr<bool> end = (*reader)->Next(&object, &begin);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);

  const std::string good = whole->bytes;
  const std::string edited = (dir_ / "edited.snap").string();
  auto write = [&](const std::string& bytes) {
    std::ofstream f(edited, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  // The error of reading every model of `edited` one by one (OK if all read).
  auto read_all = [&]() -> absl::Status {
    auto r = SnapshotFileReader::Open(edited);
    if (!r.ok()) return r.status();
    for (;;) {
      absl::StatusOr<bool> more = (*r)->Next(&object, &begin);
      if (!more.ok()) return more.status();
      if (!*more) return absl::OkStatus();
    }
  };
  // A header whose model count is `count`, the checksum recomputed.
  auto with_count = [&](uint32_t count) {
    std::string bytes = good.substr(0, good.size() - 4);
    for (int i = 0; i < 4; ++i) bytes[16 + i] = static_cast<char>((count >> (8 * i)) & 0xff);
    const uint32_t crc = crc32c::Mask(crc32c::Value(bytes.data(), bytes.size()));
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    return bytes;
  };
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x20;
  for (const std::string& bytes : {flipped, good.substr(0, good.size() - 1), with_count(4), with_count(2)}) {
    write(bytes);
    absl::StatusOr<SnapshotFile> parsed = ReadSnapshotFile(edited);
    const absl::Status streamed = read_all();
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(streamed.code(), absl::StatusCode::kDataLoss) << streamed;
    EXPECT_EQ(streamed.code(), parsed.status().code());
    EXPECT_EQ(streamed.message(), parsed.status().message());
  }
}

TEST_F(SnapshotTest, ExportImportRefusesTakenNamesAndCorruptFiles) {
  ModelRegistry a(defaults_, metrics_a_, log_);
  std::shared_ptr<Model> ma = *a.Create(Config("m"));
  Apply(*ma, Batch(120, 3, "m"));
  const std::string file = *ExportModel(*ma);
  ModelRegistry b(defaults_, metrics_b_, log_);
  absl::StatusOr<std::shared_ptr<Model>> imported = ImportModel(file, "", b, defaults_);
  ASSERT_TRUE(imported.ok()) << imported.status();
  absl::StatusOr<std::shared_ptr<Model>> again = ImportModel(file, "", b, defaults_);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "model 'm' already exists");
  absl::StatusOr<std::shared_ptr<Model>> renamed = ImportModel(file, "m2", b, defaults_);
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ((*renamed)->name(), "m2");
  std::string corrupt = file;
  corrupt[corrupt.size() / 3] ^= 1;
  absl::StatusOr<std::shared_ptr<Model>> bad = ImportModel(corrupt, "m3", b, defaults_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(b.Get("m3").ok());
  absl::StatusOr<std::shared_ptr<Model>> junk = ImportModel("hello", "m4", b, defaults_);
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  // Both continue identically.
  v1::IngestBatch more = Batch(90, 4, "m");
  for (Model* m : {ma.get(), imported->get()}) {
    BatchCheck check = ValidateBatch(more, 2, 1);
    ASSERT_TRUE(m->Ingest(check.batch, "p", 119, 1).ok());
  }
  EXPECT_EQ(ModelSnapshotCodec::Encode(*ma).bytes, ModelSnapshotCodec::Encode(**imported).bytes);
}

// A hostile edit: an export whose kind says SNAP, with the checksum recomputed so that only the
// kind check can tell. Import refuses it by name and registers nothing.
TEST_F(SnapshotTest, ImportRefusesASnapshotKindEvenWithAValidChecksum) {
  ModelRegistry a(defaults_, metrics_a_, log_);
  std::shared_ptr<Model> ma = *a.Create(Config("m"));
  Apply(*ma, Batch(50, 3, "m"));
  std::string file = *ExportModel(*ma);
  ASSERT_EQ(file.compare(8, 4, "EXPT"), 0);
  file.replace(8, 4, "SNAP");
  const size_t body = file.size() - 4;
  const uint32_t masked = crc32c::Mask(crc32c::Value(file.data(), body));
  for (int i = 0; i < 4; ++i) file[body + i] = static_cast<char>((masked >> (8 * i)) & 0xff);
  absl::StatusOr<SnapshotFile> parsed = ParseSnapshotBytes(file, "edited");
  ASSERT_TRUE(parsed.ok()) << parsed.status();  // a well-formed one-model snapshot...
  EXPECT_FALSE(parsed->is_export);
  ModelRegistry b(defaults_, metrics_b_, log_);
  absl::StatusOr<std::shared_ptr<Model>> imported = ImportModel(file, "m2", b, defaults_);
  ASSERT_FALSE(imported.ok());  // ...is still not an export
  EXPECT_EQ(imported.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(imported.status().message().find("import: not an export"), std::string::npos) << imported.status();
  EXPECT_NE(imported.status().message().find("--recover-from"), std::string::npos) << imported.status();
  EXPECT_FALSE(b.Get("m2").ok());
  EXPECT_TRUE(b.List().empty());
}

// The spool (storage/spool_file.h): parts come back as they were appended, in any order; a span
// past its end is an error naming the directory; an empty part is a span of 0 bytes; no name
// is left in the directory.
TEST_F(SnapshotTest, TheSpoolReadsBackItsPartsAndLeavesNoFile) {
  std::filesystem::create_directories(dir_);
  absl::StatusOr<SpoolFile> spool = SpoolFile::Open(dir_.string());
  ASSERT_TRUE(spool.ok()) << spool.status();
  const std::string a(100000, 'a'), b = "b", c;
  const SpoolFile::Span sa = *spool->Append(a), sb = *spool->Append(b), sc = *spool->Append(c);
  EXPECT_EQ(spool->size(), a.size() + b.size());
  EXPECT_EQ(*spool->Read(sb), b);
  EXPECT_EQ(*spool->Read(sa), a);
  EXPECT_EQ(*spool->Read(sc), c);
  absl::StatusOr<std::string> past = spool->Read({spool->size() - 1, 2});
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find(dir_.string()), std::string::npos) << past.status();
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
  EXPECT_FALSE(SpoolFile::Open((dir_ / "missing").string()).ok());
}

}  // namespace
}  // namespace cmestream::service
