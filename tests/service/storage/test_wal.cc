// Write-ahead log: CRC32C against RFC 3720, record round trip, torn tails cut at every byte,
// corruption in the middle stops recovery (point in time), bad types, sequence continuity,
// segment rotation and deletion, replay through the registry reproducing the model bit for
// bit, and an append failure (file size limit) that applies nothing.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "service/engine/batch.h"
#include "service/engine/helper_pool.h"
#include "service/engine/ingestor.h"
#include "service/engine/refresh.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/storage/crc32c.h"
#include "service/storage/manifest.h"
#include "service/storage/recovery.h"
#include "service/storage/wal.h"
#include "tests/service/registry_batches.h"

namespace cmestream::service {
namespace {

namespace fs = std::filesystem;

// Every directory TempDir made is removed when the test program exits (ctest runs one test per
// process, so after each test); a test that crashes leaves its directory for a look.
class TempDirs {
 public:
  ~TempDirs() {
    for (const fs::path& p : paths_) {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  }
  void Add(const fs::path& p) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_.push_back(p);
  }

 private:
  std::mutex mu_;
  std::vector<fs::path> paths_;
};
TempDirs& CreatedTempDirs() {
  static TempDirs dirs;  // destroyed, and so the directories removed, when the program exits
  return dirs;
}

std::string TempDir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("cmestream_wal_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  CreatedTempDirs().Add(p);
  return p.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void WriteAllTo(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// --- CRC32C -----------------------------------------------------------------------------

TEST(Crc32c, Rfc3720Vectors) {
  // RFC 3720 B.4: 32 bytes of zeros, of 0xFF, ascending 0..31, descending 31..0.
  unsigned char buf[32];
  std::memset(buf, 0, sizeof buf);
  EXPECT_EQ(crc32c::Value(buf, 32), 0x8a9136aau);
  std::memset(buf, 0xff, sizeof buf);
  EXPECT_EQ(crc32c::Value(buf, 32), 0x62a8ab43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c::Value(buf, 32), 0x46dd794eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c::Value(buf, 32), 0x113fdb5cu);
  // The iSCSI read command PDU of B.4.
  const unsigned char pdu[48] = {0x01, 0xc0, 0, 0, 0, 0, 0,    0, 0,    0, 0, 0,    0, 0, 0, 0,
                                 0x14, 0,    0, 0, 0, 0, 0x04, 0, 0,    0, 0, 0x14, 0, 0, 0, 0x18,
                                 0x28, 0,    0, 0, 0, 0, 0,    0, 0x02, 0, 0, 0,    0, 0, 0, 0};
  EXPECT_EQ(crc32c::Value(pdu, 48), 0xd9963a56u);
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xe3069283u);  // the standard check value
}

TEST(Crc32c, ExtendIsConcatenationAndMaskRoundTrips) {
  const std::string a = "hello, ", b = "write-ahead log";
  EXPECT_EQ(crc32c::Extend(crc32c::Value(a.data(), a.size()), b.data(), b.size()),
            crc32c::Value((a + b).data(), a.size() + b.size()));
  for (uint32_t c : {0u, 1u, 0xdeadbeefu, 0xffffffffu}) {
    EXPECT_EQ(crc32c::Unmask(crc32c::Mask(c)), c);
    EXPECT_NE(crc32c::Mask(c), c);
  }
}

// Every length and alignment against a bit-at-a-time CRC32C: the 8-byte steps (the CRC32
// instruction) and the byte steps of the tail agree wherever the split falls.
TEST(Crc32c, EveryLengthAndOffsetMatchesTheBitwiseDefinition) {
  auto bitwise = [](const unsigned char* p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  unsigned char buf[200];
  for (int i = 0; i < 200; ++i) buf[i] = static_cast<unsigned char>(i * 37 + 11);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= 200; ++n) {
      ASSERT_EQ(crc32c::Value(buf + offset, n), bitwise(buf + offset, n)) << "offset " << offset << " n " << n;
    }
  }
  // Continued from a CRC, across an 8-byte step.
  EXPECT_EQ(crc32c::Extend(crc32c::Value(buf, 13), buf + 13, 100), bitwise(buf, 113));
}

// --- records ----------------------------------------------------------------------------

TEST(WalRecord, RoundTripAndLayout) {
  const std::string payload = "abc\0def";
  const std::string rec = EncodeWalRecord(WalRecordType::kModelDeleted, 0x0102030405060708ull, payload);
  ASSERT_EQ(rec.size(), kWalHeaderBytes + payload.size());
  // Little-endian length and sequence at their documented offsets.
  EXPECT_EQ(static_cast<unsigned char>(rec[4]), payload.size());
  EXPECT_EQ(rec[8], 2);
  EXPECT_EQ(static_cast<unsigned char>(rec[9]), 0x08);
  EXPECT_EQ(static_cast<unsigned char>(rec[16]), 0x01);
  WalRecord r;
  size_t n = 0;
  ASSERT_TRUE(ParseWalRecord(rec.data(), rec.size(), &r, &n).ok());
  EXPECT_EQ(n, rec.size());
  EXPECT_EQ(r.sequence, 0x0102030405060708ull);
  EXPECT_EQ(r.type, WalRecordType::kModelDeleted);
  EXPECT_EQ(r.payload, payload);
}

TEST(WalRecord, EveryFlippedBitAndBadTypeIsDetected) {
  const std::string rec = EncodeWalRecord(WalRecordType::kBatch, 7, "payload bytes");
  WalRecord r;
  size_t n = 0;
  for (size_t i = 0; i < rec.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = rec;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      EXPECT_FALSE(ParseWalRecord(bad.data(), bad.size(), &r, &n).ok()) << "byte " << i << " bit " << bit;
    }
  }
  // A type byte the reader does not know, with a CRC that matches: refused by name.
  std::string typed = rec;
  typed[8] = 9;
  const uint32_t crc = crc32c::Mask(crc32c::Value(typed.data() + 8, typed.size() - 8));
  for (int i = 0; i < 4; ++i) typed[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  const absl::Status s = ParseWalRecord(typed.data(), typed.size(), &r, &n);
  EXPECT_EQ(s.message(), "unknown record type 9");
}

// --- the log ----------------------------------------------------------------------------

struct Collected {
  std::vector<WalRecord> records;
  Wal::Visitor visitor() {
    return [this](const WalRecord& r) {
      records.push_back(r);
      return absl::OkStatus();
    };
  }
};

WalOptions Options(const std::string& dir) {
  WalOptions o;
  o.dir = dir;
  o.sync = WalSync::kNever;  // the tests exercise the format, not the disk
  return o;
}

// Writes `count` deletion records "m0".."m{count-1}" and returns the segment's path.
std::string WriteRecords(const std::string& dir, int count) {
  auto wal = Wal::Open(Options(dir), 0, nullptr, nullptr);
  EXPECT_TRUE(wal.ok()) << wal.status();
  for (int i = 0; i < count; ++i) {
    auto seq = (*wal)->AppendModelDeleted("m" + std::to_string(i));
    EXPECT_TRUE(seq.ok());
    EXPECT_EQ(*seq, static_cast<uint64_t>(i + 1));
  }
  return (*wal)->SegmentPaths().back();
}

TEST(Wal, ReopenReplaysInOrderAndContinuesTheSequence) {
  const std::string dir = TempDir("reopen");
  WriteRecords(dir, 5);
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(Options(dir), 2, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  ASSERT_EQ(c.records.size(), 3u);  // sequences 3, 4, 5 (after_sequence 2)
  EXPECT_EQ(c.records[0].sequence, 3u);
  EXPECT_EQ(c.records[2].payload, "m4");
  EXPECT_EQ(rep.records, 5u);
  EXPECT_TRUE(rep.problem.empty());
  EXPECT_EQ((*wal)->last_sequence(), 5u);
  EXPECT_EQ(*(*wal)->AppendModelDeleted("next"), 6u);
  EXPECT_EQ((*wal)->SegmentPaths().size(), 2u);  // appends go to a fresh segment
}

TEST(Wal, TornTailAtEveryByteIsCutAndNeverApplied) {
  const std::string dir = TempDir("torn");
  const std::string seg = WriteRecords(dir, 3);
  const std::string full = ReadAll(seg);
  const size_t last = EncodeWalRecord(WalRecordType::kModelDeleted, 3, "m2").size();
  const size_t start = full.size() - last;
  for (size_t cut = start; cut < full.size(); ++cut) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    WriteAllTo(seg, full.substr(0, cut));
    Collected c;
    WalRecoveryReport rep;
    auto wal = Wal::Open(Options(dir), 0, c.visitor(), &rep);
    ASSERT_TRUE(wal.ok()) << wal.status();
    ASSERT_EQ(c.records.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(rep.bytes_dropped, cut - start);
    if (cut > start) {
      EXPECT_TRUE(rep.torn_tail) << cut;
      EXPECT_NE(rep.problem.find(seg), std::string::npos);
      EXPECT_NE(rep.problem.find("offset " + std::to_string(start)), std::string::npos) << rep.problem;
    } else {
      EXPECT_TRUE(rep.problem.empty());  // clean EOF at a record boundary
    }
    EXPECT_EQ(fs::file_size(seg), start);                 // the torn bytes are gone from disk
    EXPECT_EQ(*(*wal)->AppendModelDeleted("again"), 3u);  // the torn sequence is reused
    wal->reset();
    Collected again;
    ASSERT_TRUE(Wal::Open(Options(dir), 0, again.visitor(), &rep).ok());
    ASSERT_EQ(again.records.size(), 3u);
    EXPECT_EQ(again.records[2].payload, "again");
    EXPECT_TRUE(rep.problem.empty()) << rep.problem;
  }
}

TEST(Wal, FlippedByteInTheMiddleRefusesUnlessLossIsAccepted) {
  const std::string dir = TempDir("middle");
  const std::string seg = WriteRecords(dir, 5);
  std::string data = ReadAll(seg);
  const size_t rec = EncodeWalRecord(WalRecordType::kModelDeleted, 1, "m0").size();
  const size_t h = kWalSegmentHeaderBytes;
  data[h + 2 * rec + kWalHeaderBytes] ^= 0x40;  // payload of record 3
  WriteAllTo(seg, data);
  Collected refused;
  auto no = Wal::Open(Options(dir), 0, refused.visitor(), nullptr);
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no.status().message().find("records 3..3 are lost"), std::string::npos) << no.status();
  EXPECT_NE(no.status().message().find("offset " + std::to_string(h + 2 * rec)), std::string::npos) << no.status();
  EXPECT_EQ(ReadAll(seg), data);  // refusing changed nothing on disk

  WalOptions accept = Options(dir);
  accept.accept_data_loss = true;
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(accept, 0, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  ASSERT_EQ(c.records.size(), 2u);  // records 4 and 5 are valid but after the damage: not applied
  EXPECT_TRUE(rep.corrupt);
  EXPECT_FALSE(rep.torn_tail);
  EXPECT_EQ(rep.data_loss.size(), 1u);
  EXPECT_EQ(rep.bytes_dropped, 3 * rec);
  EXPECT_NE(rep.problem.find("crc mismatch"), std::string::npos) << rep.problem;
  EXPECT_EQ(fs::file_size(seg), h + 2 * rec);
  // The damaged original is kept for inspection.
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().string().find(".corrupt.") != std::string::npos) {
      ++kept;
      EXPECT_EQ(fs::file_size(e.path()), h + 5 * rec);
    }
  }
  EXPECT_EQ(kept, 1);
  EXPECT_EQ((*wal)->last_sequence(), 2u);
}

TEST(Wal, DamagedBytesWithoutAGapAreSkipped) {
  const std::string dir = TempDir("skip");
  const std::string seg = WriteRecords(dir, 4);
  std::string data = ReadAll(seg);
  const size_t rec = EncodeWalRecord(WalRecordType::kModelDeleted, 1, "m0").size();
  data.insert(kWalSegmentHeaderBytes + 2 * rec, std::string(40, '\x13'));  // garbage between records 2 and 3
  WriteAllTo(seg, data);
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(Options(dir), 0, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  ASSERT_EQ(c.records.size(), 4u);
  EXPECT_EQ(c.records[3].payload, "m3");
  ASSERT_EQ(rep.skipped_damage.size(), 1u);
  EXPECT_NE(rep.skipped_damage[0].find("40 damaged bytes"), std::string::npos) << rep.skipped_damage[0];
}

TEST(Wal, ACompleteLastRecordThatIsDamagedIsNotCutAsTorn) {
  const std::string dir = TempDir("lastflip");
  const std::string seg = WriteRecords(dir, 3);
  std::string data = ReadAll(seg);
  data[data.size() - 2] ^= 0x01;  // inside the payload of the last record
  WriteAllTo(seg, data);
  auto no = Wal::Open(Options(dir), 0, nullptr, nullptr);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.status().message().find("the last record (sequence 3) is complete but damaged"), std::string::npos)
      << no.status();
  // A power loss that persisted the size but not the last sector looks different: zeros from
  // a sector boundary to the end. That write was never acknowledged and is cut.
  const std::string big(1500, 'q');
  const std::string dir2 = TempDir("lastzero");
  std::string seg2;
  {
    auto wal = Wal::Open(Options(dir2), 0, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE((*wal)->AppendModelDeleted("a").ok());
    ASSERT_TRUE((*wal)->AppendModelDeleted(big).ok());
    seg2 = (*wal)->SegmentPaths().back();
  }
  std::string d2 = ReadAll(seg2);
  for (size_t i = 1024; i < d2.size(); ++i) d2[i] = 0;
  WriteAllTo(seg2, d2);
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(Options(dir2), 0, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  EXPECT_EQ(c.records.size(), 1u);
  EXPECT_TRUE(rep.torn_tail);
}

TEST(Wal, BadTypeWithValidCrcRefusesTheStartAndIsKept) {
  const std::string dir = TempDir("badtype");
  const std::string seg = WriteRecords(dir, 2);
  std::string bad = EncodeWalRecord(WalRecordType::kModelDeleted, 3, "x");
  bad[8] = 7;
  const uint32_t crc = crc32c::Mask(crc32c::Value(bad.data() + 8, bad.size() - 8));
  for (int i = 0; i < 4; ++i) bad[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  const std::string data = ReadAll(seg) + bad + EncodeWalRecord(WalRecordType::kModelDeleted, 4, "y");
  WriteAllTo(seg, data);
  for (bool accept : {false, true}) {  // not even --accept-data-loss cuts a record of a newer writer
    WalOptions o = Options(dir);
    o.accept_data_loss = accept;
    auto wal = Wal::Open(o, 0, nullptr, nullptr);
    ASSERT_FALSE(wal.ok());
    EXPECT_EQ(wal.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(wal.status().message().find("unknown record type 7"), std::string::npos) << wal.status();
    EXPECT_EQ(ReadAll(seg), data);
  }
}

TEST(Wal, NewerSegmentVersionRefusesTheStart) {
  const std::string dir = TempDir("newer");
  const std::string seg = WriteRecords(dir, 2);
  std::string data = ReadAll(seg);
  data[8] = 2;  // format version 2
  const uint32_t crc = crc32c::Mask(crc32c::Value(data.data(), 12));
  for (int i = 0; i < 4; ++i) data[12 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  WriteAllTo(seg, data);
  auto wal = Wal::Open(Options(dir), 0, nullptr, nullptr);
  ASSERT_FALSE(wal.ok());
  EXPECT_NE(wal.status().message().find("WAL format version 2 was written by a newer cmestreamd"), std::string::npos)
      << wal.status();
}

TEST(Wal, SequenceGapRefusesUnlessLossIsAccepted) {
  const std::string dir = TempDir("gap");
  const std::string seg = WriteRecords(dir, 2);
  WriteAllTo(seg, ReadAll(seg) + EncodeWalRecord(WalRecordType::kModelDeleted, 9, "z") +
                      EncodeWalRecord(WalRecordType::kModelDeleted, 10, "w"));
  auto no = Wal::Open(Options(dir), 0, nullptr, nullptr);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.status().message().find("records 3..8 are lost"), std::string::npos) << no.status();
  WalOptions accept = Options(dir);
  accept.accept_data_loss = true;
  Collected c;
  WalRecoveryReport rep;
  ASSERT_TRUE(Wal::Open(accept, 0, c.visitor(), &rep).ok());
  EXPECT_EQ(c.records.size(), 2u);
  EXPECT_NE(rep.problem.find("sequence 9, expected 3"), std::string::npos) << rep.problem;
}

TEST(Wal, DamageInARecordTheSnapshotCoversIsAWarningAndLosesNothing) {
  const std::string dir = TempDir("covered");
  const std::string seg = WriteRecords(dir, 6);
  std::string data = ReadAll(seg);
  const size_t rec = EncodeWalRecord(WalRecordType::kModelDeleted, 1, "m0").size();
  const size_t h = kWalSegmentHeaderBytes;
  data[h + 2 * rec + kWalHeaderBytes] ^= 0x40;  // payload of record 3
  WriteAllTo(seg, data);
  // Replayed from a snapshot covering 4: record 3 is not needed, no flag is needed either.
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(Options(dir), 4, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  ASSERT_EQ(c.records.size(), 2u);  // 5 and 6: every record after the snapshot
  EXPECT_EQ(c.records[0].sequence, 5u);
  EXPECT_EQ(c.records[1].sequence, 6u);
  EXPECT_TRUE(rep.data_loss.empty());
  EXPECT_FALSE(rep.corrupt);
  EXPECT_TRUE(rep.lost_unreadable.empty());
  ASSERT_EQ(rep.skipped_damage.size(), 1u);
  const std::string& warning = rep.skipped_damage[0];
  EXPECT_NE(warning.find(seg + " offset " + std::to_string(h + 2 * rec)), std::string::npos) << warning;
  EXPECT_NE(warning.find("records 3..3 are damaged"), std::string::npos) << warning;
  EXPECT_NE(warning.find("through sequence 4, so they are not needed and nothing is lost"), std::string::npos)
      << warning;
  EXPECT_EQ(ReadAll(seg).substr(0, data.size()), data);  // nothing cut
  EXPECT_EQ((*wal)->last_sequence(), 6u);
  wal->reset();
  // From a snapshot covering only 2, record 3 is needed: refused as before.
  auto no = Wal::Open(Options(dir), 2, nullptr, nullptr);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.status().message().find("records 3..3 are lost"), std::string::npos) << no.status();
}

// Segments 1 (records 1-2), 2 (3-4) and 3 (5-6); returns their paths.
std::vector<std::string> ThreeSegments(const std::string& dir) {
  auto wal = Wal::Open(Options(dir), 0, nullptr, nullptr);
  EXPECT_TRUE(wal.ok()) << wal.status();
  for (int i = 0; i < 6; ++i) {
    if (i == 2 || i == 4) {
      EXPECT_TRUE((*wal)->Rotate().ok());
    }
    EXPECT_TRUE((*wal)->AppendModelDeleted("m" + std::to_string(i)).ok());
  }
  return (*wal)->SegmentPaths();
}

TEST(Wal, AMissingMiddleSegmentTheSnapshotCoversLosesNothing) {
  const std::string dir = TempDir("middle_covered");
  const std::vector<std::string> segs = ThreeSegments(dir);
  ASSERT_EQ(segs.size(), 3u);
  fs::remove(segs[1]);
  WalOptions o = Options(dir);
  o.expected_first_segment = 1;
  o.expected_last_segment = 3;
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(o, 4, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  ASSERT_EQ(c.records.size(), 2u);
  EXPECT_EQ(c.records[0].sequence, 5u);
  EXPECT_TRUE(rep.data_loss.empty());
  ASSERT_EQ(rep.skipped_damage.size(), 1u);
  EXPECT_NE(rep.skipped_damage[0].find("00000002.log"), std::string::npos) << rep.skipped_damage[0];
  EXPECT_NE(rep.skipped_damage[0].find("records 3..4 are missing"), std::string::npos) << rep.skipped_damage[0];
}

TEST(Wal, AMissingMiddleSegmentLosesItsRecordsAndKeepsTheIntactNextOneAsDropped) {
  const std::string dir = TempDir("middle_lost");
  const std::vector<std::string> segs = ThreeSegments(dir);
  ASSERT_EQ(segs.size(), 3u);
  const std::string third = ReadAll(segs[2]);
  fs::remove(segs[1]);
  WalOptions o = Options(dir);
  o.expected_first_segment = 1;
  o.expected_last_segment = 3;
  auto no = Wal::Open(o, 2, nullptr, nullptr);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.status().message().find("00000002.log"), std::string::npos) << no.status();
  EXPECT_NE(no.status().message().find("records 3..4 are lost"), std::string::npos) << no.status();

  o.accept_data_loss = true;
  std::vector<uint64_t> dropped;
  o.on_dropped_record = [&](const WalRecord& r, bool damaged) {
    EXPECT_FALSE(damaged);
    dropped.push_back(r.sequence);
  };
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(o, 0, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  EXPECT_EQ(c.records.size(), 2u);                    // 1 and 2: point in time
  EXPECT_EQ(dropped, (std::vector<uint64_t>{5, 6}));  // read for the report
  ASSERT_EQ(rep.lost_unreadable.size(), 1u);          // 3..4: the missing segment
  EXPECT_EQ(rep.lost_unreadable[0], std::make_pair(uint64_t{3}, uint64_t{4}));
  ASSERT_EQ(rep.data_loss.size(), 1u);
  EXPECT_NE(rep.data_loss[0].find("records 3..4 are missing"), std::string::npos) << rep.data_loss[0];
  EXPECT_EQ(rep.data_loss[0].find("damaged"), std::string::npos) << rep.data_loss[0];
  // The intact segment after the gap is kept whole as *.dropped.*, never named *.corrupt.*.
  int kept_dropped = 0, kept_corrupt = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().string();
    if (name.find(".dropped.") != std::string::npos) {
      ++kept_dropped;
      EXPECT_EQ(ReadAll(name), third);
    }
    if (name.find(".corrupt.") != std::string::npos) ++kept_corrupt;
  }
  EXPECT_EQ(kept_dropped, 1);
  EXPECT_EQ(kept_corrupt, 0);
}

TEST(Wal, AnUnknownLogEndIsReportedAsAnOpenLoss) {
  const std::string dir = TempDir("end_unknown");
  WriteRecords(dir, 3);
  WalOptions o = Options(dir);
  o.accept_data_loss = true;
  o.log_end_unknown = true;
  WalRecoveryReport rep;
  ASSERT_TRUE(Wal::Open(o, 0, nullptr, &rep).ok());
  ASSERT_EQ(rep.lost_unreadable.size(), 1u);
  EXPECT_EQ(rep.lost_unreadable[0], std::make_pair(uint64_t{4}, uint64_t{0}));  // 4.. unknown end
}

TEST(Wal, SegmentsListedInTheManifestMustExist) {
  const std::string dir = TempDir("listed");
  WriteRecords(dir, 2);  // segment 1
  WalOptions o = Options(dir);
  o.expected_first_segment = 1;
  o.expected_last_segment = 3;  // 2 and 3 were listed but are gone
  auto wal = Wal::Open(o, 0, nullptr, nullptr);
  ASSERT_FALSE(wal.ok());
  EXPECT_NE(wal.status().message().find("2 WAL segment(s) listed in the manifest are missing"), std::string::npos)
      << wal.status();
  o.accept_data_loss = true;
  WalRecoveryReport rep;
  auto accepted = Wal::Open(o, 0, nullptr, &rep);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(rep.missing_segments, 2u);
  // New segments never reuse a number the manifest knew.
  ASSERT_TRUE((*accepted)->AppendModelDeleted("n").ok());
  EXPECT_NE((*accepted)->SegmentPaths().back().find("00000004.log"), std::string::npos);
}

TEST(Wal, RotationAndDeletionOfCoveredSegments) {
  const std::string dir = TempDir("rotate");
  WalOptions o = Options(dir);
  o.segment_bytes = 4096;
  const std::string payload(1000, 'p');
  {
    auto wal = Wal::Open(o, 0, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE((*wal)->AppendModelDeleted(payload).ok());
    // 1017-byte records: a segment closes after its 5th record (5085 >= 4096).
    EXPECT_EQ((*wal)->SegmentPaths().size(), 4u);
    auto deleted = (*wal)->DeleteSegmentsCoveredBy(12);  // segments 1-5 and 6-10 are covered
    ASSERT_TRUE(deleted.ok());
    EXPECT_EQ(*deleted, 2);
  }
  Collected c;
  WalRecoveryReport rep;
  auto wal = Wal::Open(o, 10, c.visitor(), &rep);
  ASSERT_TRUE(wal.ok()) << wal.status();
  ASSERT_EQ(c.records.size(), 10u);
  EXPECT_EQ(c.records.front().sequence, 11u);
  EXPECT_EQ((*wal)->last_sequence(), 20u);
}

// --- replay through the registry ---------------------------------------------------------

// tests/service/registry_batches.h
constexpr auto& DuffingConfig = test_helpers::SmallMapConfig;
constexpr auto& Batch = test_helpers::SmallMapBatch;
constexpr auto& Apply = test_helpers::ApplyBatch;

TEST(WalReplay, RecoveredModelIsBitForBitTheLiveOneWithProducerOffsets) {
  const std::string dir = TempDir("replay");
  Metrics metrics_live, metrics_rec;
  uint64_t live_digest = 0;
  {
    DeferredBatchLog log;
    ModelRegistry live({}, metrics_live, log);
    auto wal = OpenAndReplayWal(Options(dir), 0, live, nullptr, nullptr, nullptr);
    ASSERT_TRUE(wal.ok());
    log.Install(wal->get());
    ASSERT_TRUE(live.Create(DuffingConfig("gone")).ok());
    ASSERT_TRUE(live.Create(DuffingConfig("duffing")).ok());
    ASSERT_TRUE(Apply(live, Batch("gone", "p", 0, 50, 1)).ok());
    ASSERT_TRUE(live.Delete("gone").ok());
    ASSERT_TRUE(Apply(live, Batch("duffing", "p", 0, 300, 2)).ok());
    // An overlapping re-send: 100 duplicates, 200 new pairs; only those are logged.
    v1::IngestBatch overlap = Batch("duffing", "p", 200, 300, 3);
    auto r = Apply(live, overlap);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->applied, 200u);
    ASSERT_TRUE(Apply(live, Batch("duffing", "", 0, 77, 4)).ok());  // no producer: no dedup
    live_digest = (*live.Get("duffing"))->StateDigest();
  }
  DeferredBatchLog log;
  ModelRegistry recovered({}, metrics_rec, log);
  ReplayStats stats;
  WalRecoveryReport rep;
  auto wal = OpenAndReplayWal(Options(dir), 0, recovered, nullptr, &rep, &stats);
  ASSERT_TRUE(wal.ok()) << wal.status();
  EXPECT_EQ(stats.models_created, 2u);
  EXPECT_EQ(stats.models_deleted, 1u);
  EXPECT_EQ(stats.batches, 4u);
  EXPECT_EQ(stats.pairs, 50u + 300u + 200u + 77u);
  EXPECT_FALSE(recovered.Get("gone").ok());
  auto model = recovered.Get("duffing");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->StateDigest(), live_digest);
  EXPECT_EQ((*model)->ProducerOffset("p"), 500u);
  EXPECT_EQ((*model)->stats().samples, 577u);
  EXPECT_EQ((*model)->applied_sequence(), (*wal)->last_sequence());
  // Replay did not log again: the log holds exactly the 7 original records.
  EXPECT_EQ((*wal)->last_sequence(), 7u);
  EXPECT_EQ(rep.records, 7u);
}

TEST(WalReplay, FailedAppendAppliesNothingAndSaysWhy) {
  const std::string dir = TempDir("efbig");
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(Options(dir), 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok());
  log.Install(wal->get());
  ASSERT_TRUE(reg.Create(DuffingConfig("m")).ok());
  ASSERT_TRUE(Apply(reg, Batch("m", "p", 0, 100, 5)).ok());
  const uint64_t digest = (*reg.Get("m"))->StateDigest();
  const uintmax_t size = fs::file_size((*wal)->SegmentPaths().back());
  // Files of this process may not grow beyond their current size (writes fail with EFBIG).
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &old_action);
  struct rlimit limit = old_limit;
  limit.rlim_cur = size + 100;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  auto r = Apply(reg, Batch("m", "p", 100, 100, 6));
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::sigaction(SIGXFSZ, &old_action, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("write-ahead log append failed: File too large"), std::string::npos)
      << r.status();
  EXPECT_EQ((*reg.Get("m"))->StateDigest(), digest);
  EXPECT_EQ((*reg.Get("m"))->ProducerOffset("p"), 100u);
  EXPECT_EQ(fs::file_size((*wal)->SegmentPaths().back()), size);  // rolled back to the record start
  // Space is back: the same batch goes through, and the log replays cleanly.
  ASSERT_TRUE(Apply(reg, Batch("m", "p", 100, 100, 6)).ok());
  const uint64_t after = (*reg.Get("m"))->StateDigest();
  wal->reset();
  Metrics metrics2;
  DeferredBatchLog log2;
  ModelRegistry again({}, metrics2, log2);
  WalRecoveryReport rep;
  ASSERT_TRUE(OpenAndReplayWal(Options(dir), 0, again, nullptr, &rep, nullptr).ok());
  EXPECT_TRUE(rep.problem.empty()) << rep.problem;
  EXPECT_EQ((*again.Get("m"))->StateDigest(), after);
}

// --- group commit -----------------------------------------------------------------------------

// Polls `done` for up to 10 s (threads reaching a wait); false on timeout.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 10000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

// A one-shot gate (absl::Notification without the dependency).
class Gate {
 public:
  void Notify() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void WaitForNotification() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(WalGroupCommit, OneFsyncCoversTheRecordsOfEveryModelWrittenMeanwhile) {
  const std::string dir = TempDir("group");
  Gate release;
  std::atomic<int> syncs{0};
  WalOptions o = Options(dir);
  o.sync = WalSync::kAlways;
  std::atomic<bool> hold{false};
  o.before_group_sync = [&]() {
    if (syncs.fetch_add(1) == 0 && hold.load()) release.WaitForNotification();
    return 0;
  };
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(o, 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  for (const char* m : {"a", "b", "c"}) ASSERT_TRUE(reg.Create(DuffingConfig(m)).ok());
  const uint64_t syncs_before = (*wal)->group_syncs();
  EXPECT_EQ(syncs_before, 3u);  // one per creation: nothing else was waiting
  syncs = 0;
  hold = true;

  // Model a's batch: written, then its fdatasync is held.
  std::atomic<bool> a_done{false};
  std::thread ta([&] {
    EXPECT_TRUE(Apply(reg, Batch("a", "p", 0, 40, 1)).ok());
    a_done = true;
  });
  ASSERT_TRUE(Eventually([&] { return syncs.load() == 1; }));
  // No model lock is held across the fdatasync: a's learner lock is free (Snapshot takes it),
  // its stats are readable, and b and c write their records while a's sync runs.
  auto a = *reg.Get("a");
  EXPECT_TRUE(a->Snapshot().has_value());
  EXPECT_EQ(a->stats().samples, 0u);  // not applied before it is durable
  EXPECT_EQ(a->ProducerOffset("p"), 0u);
  std::thread tb([&] { EXPECT_TRUE(Apply(reg, Batch("b", "p", 0, 40, 2)).ok()); });
  std::thread tc([&] { EXPECT_TRUE(Apply(reg, Batch("c", "p", 0, 40, 3)).ok()); });
  ASSERT_TRUE(Eventually([&] { return (*wal)->last_sequence() == 6u; }));  // 3 creations + 3 batches
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(a_done.load());
  EXPECT_EQ((*reg.Get("b"))->stats().samples, 0u);  // b waits for a sync covering its record
  release.Notify();
  ta.join();
  tb.join();
  tc.join();
  // a's sync covered sequence 4 only (its target was taken before b and c wrote); one more
  // fdatasync covered both 5 and 6.
  EXPECT_EQ((*wal)->group_syncs() - syncs_before, 2u);
  for (const char* m : {"a", "b", "c"}) {
    EXPECT_EQ((*reg.Get(m))->stats().samples, 40u);
    EXPECT_EQ((*reg.Get(m))->ProducerOffset("p"), 40u);
  }
}

TEST(WalGroupCommit, AFailedFsyncAppliesNothingFailsStickyAndReplayIsConsistent) {
  const std::string dir = TempDir("groupfail");
  Gate release;
  std::atomic<int> syncs{0};
  std::atomic<bool> arm{false};
  WalOptions o = Options(dir);
  o.sync = WalSync::kAlways;
  o.before_group_sync = [&]() -> int {
    if (!arm.load()) return 0;
    if (syncs.fetch_add(1) == 0) release.WaitForNotification();
    return EIO;
  };
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(o, 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  ASSERT_TRUE(reg.Create(DuffingConfig("a")).ok());
  ASSERT_TRUE(reg.Create(DuffingConfig("b")).ok());
  ASSERT_TRUE(Apply(reg, Batch("a", "p", 0, 30, 1)).ok());
  const uint64_t digest_a = (*reg.Get("a"))->StateDigest();
  const uint64_t digest_b = (*reg.Get("b"))->StateDigest();
  arm = true;
  absl::StatusOr<Model::IngestResult> ra, rb;
  std::thread ta([&] { ra = Apply(reg, Batch("a", "p", 30, 30, 2)); });
  ASSERT_TRUE(Eventually([&] { return syncs.load() == 1; }));
  std::thread tb([&] { rb = Apply(reg, Batch("b", "q", 0, 30, 3)); });  // a follower of the failing sync
  ASSERT_TRUE(Eventually([&] { return (*wal)->last_sequence() == 5u; }));
  release.Notify();
  ta.join();
  tb.join();
  for (const auto* r : {&ra, &rb}) {
    ASSERT_FALSE(r->ok());
    EXPECT_EQ(r->status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(r->status().message().find("fdatasync"), std::string::npos) << r->status();
  }
  // Nothing of either batch was applied, and the log refuses everything after it.
  EXPECT_EQ((*reg.Get("a"))->StateDigest(), digest_a);
  EXPECT_EQ((*reg.Get("b"))->StateDigest(), digest_b);
  EXPECT_EQ((*reg.Get("a"))->ProducerOffset("p"), 30u);
  auto later = Apply(reg, Batch("a", "p", 30, 10, 4));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*wal)->last_sequence(), 5u);  // nothing written after the failure
  EXPECT_EQ(reg.Create(DuffingConfig("c")).status().code(), absl::StatusCode::kUnavailable);
  wal->reset();
  // After a restart, replay applies the two unacknowledged records that reached the disk (here
  // the fdatasync failure was simulated, so the bytes are there): wal.h A RECORD WRITTEN BUT
  // NEVER ACKNOWLEDGED. The producers' offsets move with them, so a retry from GetProducer's
  // applied_offset is de-duplicated, and the state equals a daemon that applied them.
  Metrics m2, m3;
  DeferredBatchLog l2;
  NullBatchLog l3;
  ModelRegistry again({}, m2, l2), reference({}, m3, l3);
  WalRecoveryReport rep;
  ReplayStats stats;
  auto reopened = OpenAndReplayWal(Options(dir), 0, again, nullptr, &rep, &stats);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_TRUE(rep.problem.empty()) << rep.problem;
  EXPECT_EQ(stats.batches, 3u);
  EXPECT_EQ((*again.Get("a"))->ProducerOffset("p"), 60u);
  EXPECT_EQ((*again.Get("b"))->ProducerOffset("q"), 30u);
  ASSERT_TRUE(reference.Create(DuffingConfig("a")).ok());
  ASSERT_TRUE(Apply(reference, Batch("a", "p", 0, 30, 1)).ok());
  ASSERT_TRUE(Apply(reference, Batch("a", "p", 30, 30, 2)).ok());
  EXPECT_EQ((*again.Get("a"))->StateDigest(), (*reference.Get("a"))->StateDigest());
  // The retry of the refused batch is a pure duplicate now.
  l2.Install(reopened->get());
  auto retry = Apply(again, Batch("a", "p", 30, 30, 2));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->applied, 0u);
}

TEST(WalGroupCommit, RotationWaitsForARunningGroupSync) {
  const std::string dir = TempDir("grouprotate");
  WalOptions o = Options(dir);
  o.sync = WalSync::kAlways;
  o.segment_bytes = 4096;
  auto wal = Wal::Open(o, 0, nullptr, nullptr);
  ASSERT_TRUE(wal.ok());
  const std::string payload(1000, 'p');
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) ok += (*wal)->AppendModelDeleted(payload).ok() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
  EXPECT_LE((*wal)->group_syncs(), 100u);
  wal->reset();
  Collected c;
  WalRecoveryReport rep;
  ASSERT_TRUE(Wal::Open(Options(dir), 0, c.visitor(), &rep).ok());
  ASSERT_EQ(c.records.size(), 100u);
  for (size_t i = 0; i < c.records.size(); ++i) EXPECT_EQ(c.records[i].sequence, i + 1);
  EXPECT_TRUE(rep.problem.empty()) << rep.problem;
}

// --- the registry lock (service/README.md "Locks") -----------------------------------------

// Runs `call` on another thread; true if it returned within 10 s (it did not wait for the
// registry lock held by a stuck change). The thread is joined either way.
template <typename F>
bool ReturnsWhileBlocked(F call, std::vector<std::thread>* threads) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  threads->emplace_back([call, done] {
    call();
    *done = true;
  });
  return Eventually([&] { return done->load(); });
}

// A BatchLog that forwards to the WAL but can hold one batch inside WriteBatch: the model's
// log lock is then held, as while a real batch record is being written.
class GatedLog final : public BatchLog {
 public:
  explicit GatedLog(BatchLog* target) : target_(target) {}
  Gate release;
  std::atomic<bool> hold{false};
  std::atomic<bool> holding{false};
  absl::StatusOr<uint64_t> WriteBatch(const std::string& model, const std::string& producer_id, uint64_t offset_after,
                                      const PairBatch& batch, int64_t first, const std::string& episode_id) override {
    if (hold.exchange(false)) {
      holding = true;
      release.WaitForNotification();
    }
    return target_->WriteBatch(model, producer_id, offset_after, batch, first, episode_id);
  }
  absl::Status WaitDurable(uint64_t sequence) override { return target_->WaitDurable(sequence); }
  absl::StatusOr<uint64_t> AppendModelCreated(const v1::ModelConfig& config) override {
    return target_->AppendModelCreated(config);
  }
  absl::StatusOr<uint64_t> AppendModelDeleted(const std::string& name) override {
    return target_->AppendModelDeleted(name);
  }
  absl::StatusOr<uint64_t> AppendModelImported(const std::string& name, const std::string& image) override {
    return target_->AppendModelImported(name, image);
  }
  uint64_t last_sequence() const override { return target_->last_sequence(); }

 private:
  BatchLog* target_;
};

// A deletion waits for the model's batch being written and for its own record's fdatasync;
// neither wait holds the registry lock, so lookups of every model, listings and lookups of the
// model being deleted go on. (Before, Delete held the registry lock across both, stalling
// every RPC of the daemon behind one model's write and one fdatasync.)
TEST(RegistryLock, DeleteWaitsForAnInFlightBatchAndItsFsyncWithoutTheRegistryLock) {
  const std::string dir = TempDir("regdelete");
  WalOptions o = Options(dir);
  o.sync = WalSync::kAlways;
  Gate sync_release;
  std::atomic<bool> hold_sync{false};
  std::atomic<int> held_syncs{0};
  o.before_group_sync = [&]() {
    if (hold_sync.exchange(false)) {
      ++held_syncs;
      sync_release.WaitForNotification();
    }
    return 0;
  };
  Metrics metrics;
  DeferredBatchLog deferred;
  GatedLog log(&deferred);
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(o, 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  deferred.Install(wal->get());
  for (const char* m : {"a", "b"}) ASSERT_TRUE(reg.Create(DuffingConfig(m)).ok());

  // 1. A batch of a is held inside WriteBatch (a's log lock held); Delete("a") waits for it.
  log.hold = true;
  std::vector<std::thread> threads;
  std::atomic<bool> batch_ok{false}, deleted{false};
  threads.emplace_back([&] { batch_ok = Apply(reg, Batch("a", "p", 0, 20, 1)).ok(); });
  ASSERT_TRUE(Eventually([&] { return log.holding.load(); }));
  absl::Status delete_status;
  threads.emplace_back([&] {
    delete_status = reg.Delete("a");
    deleted = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(deleted.load());  // waits for the batch being written
  EXPECT_TRUE(ReturnsWhileBlocked([&] { EXPECT_TRUE(reg.Get("b").ok()); }, &threads));
  EXPECT_TRUE(ReturnsWhileBlocked([&] { EXPECT_EQ(reg.List().size(), 2u); }, &threads));
  EXPECT_TRUE(ReturnsWhileBlocked([&] { EXPECT_TRUE(reg.Get("a").ok()); }, &threads));  // still there
  // The name is busy until the deletion ends: a creation under it is refused, not queued.
  EXPECT_TRUE(ReturnsWhileBlocked(
      [&] { EXPECT_EQ(reg.Create(DuffingConfig("a")).status().code(), absl::StatusCode::kAlreadyExists); }, &threads));

  // 2. The batch goes on; the deletion record is written and its fdatasync is held.
  hold_sync = true;
  log.release.Notify();
  ASSERT_TRUE(Eventually([&] { return held_syncs.load() == 1; }));
  EXPECT_TRUE(ReturnsWhileBlocked([&] { EXPECT_TRUE(reg.Get("b").ok()); }, &threads));
  EXPECT_TRUE(ReturnsWhileBlocked([&] { EXPECT_EQ(reg.List().size(), 2u); }, &threads));
  sync_release.Notify();
  for (auto& t : threads) t.join();
  EXPECT_TRUE(batch_ok.load());  // written before the deletion record: applied, as replay does
  EXPECT_TRUE(delete_status.ok()) << delete_status;
  EXPECT_EQ(reg.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.Delete("a").code(), absl::StatusCode::kNotFound);
  // The cut sees the deletion: records 1-2 creations, 3 the batch, 4 the deletion.
  uint64_t cut = 0;
  EXPECT_EQ(reg.ListAtCut(&cut).size(), 1u);
  EXPECT_EQ(cut, 4u);
  // The name is free again, with fresh metric series.
  EXPECT_TRUE(reg.Create(DuffingConfig("a")).ok());
}

// A creation waiting for its record's fdatasync holds a reservation, not the registry lock:
// other models stay reachable, the name is taken for a second creation, and the snapshot cut
// (ListAtCut) waits until the model is in the map, so a cut never covers a creation record
// whose model it does not list.
TEST(RegistryLock, CreateWaitsForItsFsyncWithoutTheRegistryLockAndTheCutWaitsForIt) {
  const std::string dir = TempDir("regcreate");
  WalOptions o = Options(dir);
  o.sync = WalSync::kAlways;
  Gate sync_release;
  std::atomic<bool> hold_sync{false};
  std::atomic<int> held_syncs{0};
  o.before_group_sync = [&]() {
    if (hold_sync.exchange(false)) {
      ++held_syncs;
      sync_release.WaitForNotification();
    }
    return 0;
  };
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(o, 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  ASSERT_TRUE(reg.Create(DuffingConfig("b")).ok());

  hold_sync = true;
  std::vector<std::thread> threads;
  std::atomic<bool> created{false}, cut_done{false};
  threads.emplace_back([&] {
    EXPECT_TRUE(reg.Create(DuffingConfig("a")).ok());
    created = true;
  });
  ASSERT_TRUE(Eventually([&] { return held_syncs.load() == 1; }));
  EXPECT_TRUE(ReturnsWhileBlocked([&] { EXPECT_TRUE(reg.Get("b").ok()); }, &threads));
  EXPECT_TRUE(
      ReturnsWhileBlocked([&] { EXPECT_EQ(reg.Get("a").status().code(), absl::StatusCode::kNotFound); }, &threads));
  EXPECT_TRUE(ReturnsWhileBlocked(
      [&] { EXPECT_EQ(reg.Create(DuffingConfig("a")).status().code(), absl::StatusCode::kAlreadyExists); }, &threads));
  uint64_t cut = 0;
  size_t cut_models = 0;
  threads.emplace_back([&] {
    cut_models = reg.ListAtCut(&cut).size();
    cut_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(cut_done.load());  // record 2 is written, model a not yet in the map
  EXPECT_FALSE(created.load());
  sync_release.Notify();
  for (auto& t : threads) t.join();
  EXPECT_TRUE(created.load());
  EXPECT_EQ(cut, 2u);
  EXPECT_EQ(cut_models, 2u);
}

// The engine's threads together (run under ThreadSanitizer by scripts/sanitize.sh): producers
// ingest through the Ingestor's pool into three models with a group-committing WAL, the
// refresh scheduler builds views and answers waiters, and another thread creates, lists, cuts
// and deletes a fourth model meanwhile. Every batch is applied exactly once and in order.
TEST(EngineThreads, ProducersPoolSchedulerAndRegistryChangesTogether) {
  const std::string dir = TempDir("engine");
  WalOptions o = Options(dir);
  o.sync = WalSync::kAlways;
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(o, 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  // Every model's learner splits its batches with a helper thread (docs/algorithms.md §9.3).
  HelperPool helpers(1);
  reg.SetSideExecutor(&helpers);
  const std::vector<std::string> names = {"a", "b", "c"};
  for (const std::string& m : names) ASSERT_TRUE(reg.Create(DuffingConfig(m)).ok());
  RefreshScheduler scheduler(reg, {.tick_seconds = 0.01});
  scheduler.Start();
  {
    Ingestor ingestor(reg, metrics, {}, 3);
    constexpr int kBatches = 5, kPairs = 40;
    std::vector<std::thread> threads;
    for (size_t p = 0; p < names.size(); ++p) {
      threads.emplace_back([&, p] {
        for (int k = 0; k < kBatches; ++k) {
          const v1::IngestBatch b = Batch(names[p], "p", static_cast<uint64_t>(k * kPairs), kPairs, 10 * p + k);
          absl::StatusOr<v1::IngestAck> ack = ingestor.Apply(b, static_cast<uint64_t>(k));
          ASSERT_TRUE(ack.ok()) << ack.status();
          EXPECT_EQ(ack->producer_offset(), static_cast<uint64_t>((k + 1) * kPairs));
        }
      });
    }
    threads.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        EXPECT_TRUE(reg.Create(DuffingConfig("tmp")).ok());
        uint64_t cut = 0;
        EXPECT_GE(reg.ListAtCut(&cut).size(), 4u);
        EXPECT_GT(reg.committed_bytes(), 0);
        EXPECT_TRUE(reg.Delete("tmp").ok());
      }
    });
    for (auto& t : threads) t.join();
    for (const std::string& m : names) {
      std::shared_ptr<Model> model = *reg.Get(m);
      EXPECT_EQ(model->ProducerOffset("p"), static_cast<uint64_t>(kBatches * kPairs));
      EXPECT_EQ(model->stats().samples, static_cast<uint64_t>(kBatches * kPairs));
      Gate done;
      absl::StatusOr<std::shared_ptr<const ModelView>> view;
      scheduler.Wait(model, kBatches * kPairs, RefreshScheduler::Clock::now() + std::chrono::seconds(120),
                     [&](absl::StatusOr<std::shared_ptr<const ModelView>> v) {
                       view = std::move(v);
                       done.Notify();
                     });
      done.WaitForNotification();
      ASSERT_TRUE(view.ok()) << view.status();
      EXPECT_EQ((*view)->samples, static_cast<uint64_t>(kBatches * kPairs));
    }
  }
  scheduler.Stop();
  EXPECT_EQ(reg.Get("tmp").status().code(), absl::StatusCode::kNotFound);
  // 3 creations, 15 batches, 4 x (creation + deletion) of tmp.
  EXPECT_EQ((*wal)->last_sequence(), 26u);
}

// The periodic trigger rests at least RefreshScheduler::kPeriodicIdlePerBuild times the last
// view's build time (refresh.h): with a view that took 0.4 s, an interval of 0.05 s and new
// samples waiting, the next periodic refresh comes after 3.6 s, not after 0.05 s.
TEST(RefreshScheduler, APeriodicRefreshRestsNineTimesTheLastViewsBuildTime) {
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(Options(TempDir("rest")), 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  v1::ModelConfig config = DuffingConfig("a");
  config.set_refresh_interval_seconds(0.05);
  ASSERT_TRUE(reg.Create(config).ok()) << reg.Create(config).status();
  std::shared_ptr<Model> model = *reg.Get("a");
  Ingestor ingestor(reg, metrics, {}, 1);
  ASSERT_TRUE(ingestor.Apply(Batch("a", "p", 0, 200, 1), 0).ok());
  // A view as if the last build had taken 0.4 s, reflecting none of the samples.
  auto slow = std::make_shared<ModelView>();
  slow->version = 1;
  slow->built_at = RefreshScheduler::Clock::now();
  slow->build_seconds = 0.4;
  model->Publish(slow);
  const RefreshScheduler::Clock::time_point start = RefreshScheduler::Clock::now();
  model->last_refresh_attempt = start;
  RefreshScheduler scheduler(reg, {.tick_seconds = 0.01});
  scheduler.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(model->view(), slow) << "refreshed within 1.5 s, before 9 x 0.4 s of rest";
  while (model->view() == slow && RefreshScheduler::Clock::now() - start < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double waited = std::chrono::duration<double>(RefreshScheduler::Clock::now() - start).count();
  scheduler.Stop();
  ASSERT_NE(model->view(), slow) << "no periodic refresh in 30 s";
  EXPECT_GE(waited, 9 * 0.4 - 0.05);
  EXPECT_EQ(model->view()->samples, 200u);
}

// --- the manifest ---------------------------------------------------------------------------

TEST(Manifest, RoundTripsAndRefusesDamageAndNewerVersions) {
  ManifestState s;
  s.snapshots = {{"snapshot-00000000000000000003.snap", 41}, {"snapshot-00000000000000000004.snap", 77}};
  s.wal_first_segment = 5;
  s.wal_last_segment = 9;
  s.wal_first_sequence = 42;
  const std::string text = EncodeManifest(s);
  absl::StatusOr<ManifestState> back = ParseManifest(text, "M");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  for (size_t i = 0; i < text.size(); ++i) {  // any flipped byte is caught
    std::string bad = text;
    bad[i] = static_cast<char>(bad[i] ^ 0x04);
    EXPECT_FALSE(ParseManifest(bad, "M").ok()) << "byte " << i;
  }
  std::string newer = text;
  newer.replace(newer.find("manifest 1"), 10, "manifest 7");
  newer = newer.substr(0, newer.rfind("crc "));
  const uint32_t crc = crc32c::Mask(crc32c::Value(newer.data(), newer.size()));
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  newer += std::string("crc ") + hex + "\n";
  absl::StatusOr<ManifestState> refused = ParseManifest(newer, "M");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("manifest version 7"), std::string::npos) << refused.status();

  const std::string dir = TempDir("manifest");
  Manifest m(dir + "/MANIFEST");
  EXPECT_EQ(m.Load().status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(m.Write(s).ok());
  ASSERT_TRUE(m.SetWalSegments(6, 10).ok());
  Manifest again(dir + "/MANIFEST");
  absl::StatusOr<ManifestState> loaded = again.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->wal_first_segment, 6u);
  EXPECT_EQ(loaded->snapshots.size(), 2u);
}

// The per-model report of an accepted data loss (service/README.md "Recovery"): pairs counted
// from the dropped records (a trajectory holds one state more than pairs), dims from the model
// that still exists or from a dropped creation, unknown dims as null, names escaped.
TEST(LossReport, OneJsonLinePerModelWithWhatWasDropped) {
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(Options(TempDir("loss")), 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  ASSERT_TRUE(reg.Create(DuffingConfig("kept")).ok());
  const auto record = [](WalRecordType type, uint64_t sequence, const google::protobuf::Message& m) {
    WalRecord r;
    r.type = type;
    r.sequence = sequence;
    r.payload = m.SerializeAsString();
    return r;
  };
  LossReport loss;
  EXPECT_TRUE(loss.empty());
  loss.AddDropped(record(WalRecordType::kBatch, 7, Batch("kept", "p", 0, 30, 1)), reg);
  loss.AddDropped(record(WalRecordType::kBatch, 8, Batch("kept", "p", 30, 20, 2)), reg);
  const std::string odd = "new\"\x01";
  loss.AddDropped(record(WalRecordType::kModelCreated, 9, DuffingConfig(odd)), reg);
  v1::IngestBatch trajectory;
  trajectory.set_model("kept");
  for (int i = 0; i < 22; ++i) trajectory.add_states(0.1 * i);  // 11 states of dim 2: 10 pairs
  loss.AddDropped(record(WalRecordType::kBatch, 10, trajectory), reg);
  loss.AddDropped(record(WalRecordType::kBatch, 11, Batch(odd, "", 0, 10, 3)), reg);
  loss.AddOrphanBatch(Batch("orphan", "", 0, 5, 4), 12);  // its creation is gone: dim unknown
  loss.AddUnreadable(20, 0);
  EXPECT_FALSE(loss.empty());
  // The log's end is unknown (20 on): every model may have lost more, so no count is exact.
  const std::vector<std::string> expected = {
      R"({"model": "kept", "pairs_dropped": null, "pairs_dropped_at_least": 60, "extent": "unknown", )"
      R"("producers": [{"producer": "p", "offsets": [0, null]}], "wal_sequences": [[7, 8], [10, 10]], )"
      R"("model_dropped": false})",
      R"({"model": "new\"\u0001", "pairs_dropped": null, "pairs_dropped_at_least": 10, "extent": "unknown", )"
      R"("producers": [], "wal_sequences": [[9, 9], [11, 11]], "model_dropped": true})",
      R"({"model": "orphan", "pairs_dropped": null, "pairs_dropped_at_least": 0, "extent": "unknown", )"
      R"("producers": [], "wal_sequences": [[12, 12]], "model_dropped": true})",
      R"({"model": null, "pairs_dropped": null, "wal_sequences": [[20, null]], "model_dropped": null})"};
  EXPECT_EQ(loss.JsonLines(reg), expected);
}

TEST(LossReport, ProducerOffsetsGiveWhatAMissingRangeHeldPerModelAndProducer) {
  Metrics metrics;
  DeferredBatchLog log;
  ModelRegistry reg({}, metrics, log);
  auto wal = OpenAndReplayWal(Options(TempDir("loss_producers")), 0, reg, nullptr, nullptr, nullptr);
  ASSERT_TRUE(wal.ok()) << wal.status();
  log.Install(wal->get());
  const auto record = [](WalRecordType type, uint64_t sequence, const google::protobuf::Message& m) {
    WalRecord r;
    r.type = type;
    r.sequence = sequence;
    r.payload = m.SerializeAsString();
    return r;
  };
  // The recovered state (records 1..6): a has taken pa's offsets 0..99, b pb's 0..39, c pc's 0..9.
  ASSERT_TRUE(reg.Create(DuffingConfig("a")).ok());  // logged as records 1..3
  ASSERT_TRUE(reg.Create(DuffingConfig("b")).ok());
  ASSERT_TRUE(reg.Create(DuffingConfig("c")).ok());
  ReplayStats stats;
  ASSERT_TRUE(ReplayWalRecord(reg, record(WalRecordType::kBatch, 4, Batch("a", "pa", 0, 100, 1)), &stats).ok());
  ASSERT_TRUE(ReplayWalRecord(reg, record(WalRecordType::kBatch, 5, Batch("b", "pb", 0, 40, 2)), &stats).ok());
  ASSERT_TRUE(ReplayWalRecord(reg, record(WalRecordType::kBatch, 6, Batch("c", "pc", 0, 10, 3)), &stats).ok());
  // Records 7..9 are unreadable (a missing segment); 10 and 11 were read and dropped (point in time).
  LossReport loss;
  loss.AddUnreadable(7, 9);
  loss.AddDropped(record(WalRecordType::kBatch, 10, Batch("a", "pa", 250, 50, 4)), reg);
  loss.AddDropped(record(WalRecordType::kBatch, 11, Batch("b", "pb", 70, 10, 5)), reg);
  const std::vector<LossReport::ModelLoss> models = loss.Models(reg);
  ASSERT_EQ(models.size(), 3u);
  // a: offsets 100..249 were in the unreadable records, 250..299 in the dropped one.
  EXPECT_EQ(models[0].model, "a");
  EXPECT_EQ(models[0].pairs, 200u);
  EXPECT_TRUE(models[0].exact);
  ASSERT_EQ(models[0].producers.size(), 1u);
  EXPECT_EQ(models[0].producers[0].first, 100u);
  EXPECT_EQ(models[0].producers[0].end, 300u);
  EXPECT_EQ(models[1].model, "b");
  EXPECT_EQ(models[1].pairs, 40u);  // 40..69 unreadable, 70..79 dropped
  EXPECT_TRUE(models[1].exact);
  // c's producer never shows up after the unreadable records: what it lost there is unknown.
  EXPECT_EQ(models[2].model, "c");
  EXPECT_EQ(models[2].pairs, 0u);
  EXPECT_FALSE(models[2].exact);
  const LossReport::Totals t = loss.Total(reg);
  EXPECT_EQ(t.records, 5u);  // 7..11
  EXPECT_TRUE(t.records_exact);
  EXPECT_EQ(t.pairs, 240u);
  EXPECT_FALSE(t.pairs_exact);
  const std::vector<std::string> text = loss.TextLines(reg);
  ASSERT_EQ(text.size(), 4u);
  EXPECT_EQ(text[0], R"(model "a": 200 acknowledged pairs lost; producer "pa" offsets 100..299)");
  EXPECT_EQ(text[2], R"(model "c": unknown, at least 0 acknowledged pairs lost)");
  EXPECT_EQ(text[3], "in total unknown, at least 240 pairs in 3 model(s), 5 WAL records lost");
}

}  // namespace
}  // namespace cmestream::service
