#include "service/storage/wal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "service/enum_names.h"
#include "service/observability/metric_families.h"
#include "service/storage/crc32c.h"
#include "service/storage/file_util.h"
#include "service/storage/recovery_progress.h"

namespace cmestream::service {
namespace {

using io::LoadLe32;
using io::LoadLe64;
using io::StoreLe32;
using io::StoreLe64;

std::string Errno(int err) { return std::strerror(err); }

// Disk-full-like errors are the client's signal to back off (RESOURCE_EXHAUSTED); anything
// else is an unavailable log (UNAVAILABLE).
absl::Status AppendError(int err, const std::string& what, const std::string& path) {
  const std::string msg =
      absl::StrCat("write-ahead log append failed: ", Errno(err), " (", what, " ", path, "); nothing was applied");
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

std::string SegmentName(uint64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08llu.log", static_cast<unsigned long long>(number));
  return buf;
}

// Parses "NNNNNNNN.log" (8+ digits); false for anything else (e.g. *.log.corrupt).
bool ParseSegmentName(const std::string& name, uint64_t* number) {
  if (name.size() < 12 || name.compare(name.size() - 4, 4, ".log") != 0) return false;
  const std::string digits = name.substr(0, name.size() - 4);
  if (digits.size() < 8 || digits.size() > 19 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *number = std::stoull(digits);
  return true;
}

// Segment header (format version 1): magic, version, masked CRC32C of the 12 bytes before it.
// Segments without it are read as version 0 (records from offset 0), as written before.
constexpr char kSegmentMagic[8] = {'C', 'M', 'E', 'W', 'A', 'L', 'S', 'G'};

std::string SegmentHeader() {
  std::string h(kWalSegmentHeaderBytes, '\0');
  std::memcpy(h.data(), kSegmentMagic, 8);
  StoreLe32(h.data() + 8, kWalFormatVersion);
  StoreLe32(h.data() + 12, crc32c::Mask(crc32c::Value(h.data(), 12)));
  return h;
}

bool AllZero(const std::string& data, size_t from) {
  return std::all_of(data.begin() + static_cast<std::ptrdiff_t>(from), data.end(), [](char c) { return c == 0; });
}

// The first valid record with a plausible later sequence number in data[from, end), if any:
// its sequence and offset. The sequence field is compared first, so the scan is O(n) with a
// CRC only at rare candidates.
bool FindNextValidRecord(const std::string& data, size_t from, uint64_t prev_sequence, uint64_t* sequence,
                         size_t* offset) {
  const uint64_t max_sequence = prev_sequence + 1 + data.size() / kWalHeaderBytes;
  WalRecord r;
  size_t n = 0;
  for (size_t off = from; off + kWalHeaderBytes <= data.size(); ++off) {
    const uint64_t seq = LoadLe64(data.data() + off + 9);
    if (seq <= prev_sequence || seq > max_sequence) continue;
    if (ParseWalRecord(data.data() + off, data.size() - off, &r, &n).ok()) {
      *sequence = seq;
      *offset = off;
      return true;
    }
  }
  return false;
}

// Whether the record starting at `pos` has its whole header and payload in the file.
bool RecordIsComplete(const std::string& data, size_t pos) {
  if (data.size() - pos < kWalHeaderBytes) return false;
  const uint64_t length = LoadLe32(data.data() + pos + 4);
  return length <= kWalMaxPayloadBytes && data.size() - pos - kWalHeaderBytes >= length;
}

// A complete last record whose bytes are zero from a 512-byte file offset to the end of the
// file: the shape a power loss leaves when the file size reached the disk but the last
// sectors of data did not (ext4 and xfs expose unwritten blocks as zeros). Such a write never
// completed its fdatasync, so it was not acknowledged. A bit flip in a record that was
// written whole does not look like this, and is refused as data loss instead.
bool ZeroFilledFromSector(const std::string& data, size_t pos) {
  size_t z = data.size();
  while (z > pos && data[z - 1] == 0) --z;
  if (z == data.size()) return false;
  const size_t sector = (z + 511) / 512 * 512;  // first sector boundary at or after z
  return sector < data.size();                  // the zero run covers a sector boundary and reaches the end
}

// Records with sequence > after in the segment at `path`, found by walking the length fields
// with small reads (no checksum): only the progress report's total, so damage that ends the
// walk early just makes it an underestimate.
uint64_t CountRecordsAfter(const std::string& path, uint64_t after) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  uint64_t count = 0;
  if (::fstat(fd, &st) == 0) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    char header[kWalSegmentHeaderBytes > kWalHeaderBytes ? kWalSegmentHeaderBytes : kWalHeaderBytes];
    uint64_t pos = 0;
    if (::pread(fd, header, kWalSegmentHeaderBytes, 0) == static_cast<ssize_t>(kWalSegmentHeaderBytes) &&
        std::memcmp(header, kSegmentMagic, 8) == 0) {
      pos = kWalSegmentHeaderBytes;
    }
    while (pos + kWalHeaderBytes <= size &&
           ::pread(fd, header, kWalHeaderBytes, static_cast<off_t>(pos)) == static_cast<ssize_t>(kWalHeaderBytes)) {
      const uint64_t length = LoadLe32(header + 4);
      if (length > kWalMaxPayloadBytes || size - pos - kWalHeaderBytes < length) break;
      if (LoadLe64(header + 9) > after) ++count;
      pos += kWalHeaderBytes + length;
    }
  }
  ::close(fd);
  return count;
}

// With accept_data_loss, what recovery drops after damage: every record of data[from, end) in
// order, checked (damaged = false) or, failing its checksum but complete, with the expected
// sequence and a known type, as written (damaged = true: best effort, for the loss report).
// Sequences that cannot be read at all are appended to `unreadable`. *expected: the next
// sequence, advanced past what was passed on.
// Returns whether data[from, end) was nothing but valid records (gaps between them allowed: a
// missing segment leaves the next one intact).
bool CollectDropped(const std::string& data, size_t from, uint64_t* expected,
                    const std::function<void(const WalRecord&, bool)>& on_dropped,
                    std::vector<std::pair<uint64_t, uint64_t>>* unreadable) {
  WalRecord record;
  size_t pos = from;
  bool intact = true;
  while (pos < data.size()) {
    size_t n = 0;
    if (ParseWalRecord(data.data() + pos, data.size() - pos, &record, &n).ok()) {
      if (record.sequence > *expected) unreadable->emplace_back(*expected, record.sequence - 1);
      if (record.sequence >= *expected) {
        if (on_dropped) on_dropped(record, false);
        *expected = record.sequence + 1;
      }
      pos += n;
      continue;
    }
    if (RecordIsComplete(data, pos)) {
      const auto type = static_cast<uint8_t>(data[pos + 8]);
      const uint64_t length = LoadLe32(data.data() + pos + 4);
      if (LoadLe64(data.data() + pos + 9) == *expected && type >= 1 && type <= kWalMaxKnownRecordType) {
        record.type = static_cast<WalRecordType>(type);
        record.sequence = *expected;
        record.payload.assign(data.data() + pos + kWalHeaderBytes, length);
        if (on_dropped) on_dropped(record, true);
        ++*expected;
        pos += kWalHeaderBytes + length;
        intact = false;
        continue;
      }
    }
    intact = false;
    uint64_t next = 0;
    size_t offset = 0;
    if (!FindNextValidRecord(data, pos + 1, *expected - 1, &next, &offset)) {
      if (!AllZero(data, pos)) unreadable->emplace_back(*expected, 0);  // how many records: unknown
      return intact;
    }
    pos = offset;
  }
  return intact;
}

// The first sequence of damaged bytes at `pos` that end before the valid record `next`: the one
// after the last valid record read, or, if none was read yet (older segments pruned), the
// damaged record's own sequence field when it is plausible (best effort, for the message).
uint64_t FirstDamaged(const std::string& data, size_t pos, uint64_t prev, uint64_t next) {
  if (prev != 0) return prev + 1;
  if (data.size() - pos >= kWalHeaderBytes) {
    const uint64_t written = LoadLe64(data.data() + pos + 9);
    if (written > 0 && written < next) return written;
  }
  return 1;
}

// The warning for records that are damaged or missing but not needed: every one of them is
// <= the covered sequence of the snapshot being replayed from.
std::string CoveredWarning(const std::string& what, uint64_t covered) {
  return absl::StrCat(what, "; the snapshot in use covers every record through sequence ", covered,
                      ", so they are not needed and nothing is lost (an older snapshot can no longer be a "
                      "lossless fallback until the next snapshot prunes this segment)");
}

}  // namespace

absl::Status WalOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("WAL directory is empty");
  if (!std::isfinite(sync_interval_ms) || sync_interval_ms <= 0 || sync_interval_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --wal-sync-interval-ms is ", sync_interval_ms, ", expected milliseconds in (0, 60000]"));
  }
  if (segment_bytes < 4096) {
    return absl::InvalidArgumentError(absl::StrCat("WAL segment size is ", segment_bytes, " bytes, expected >= 4096"));
  }
  return absl::OkStatus();
}

namespace {

// The --wal-sync names, for ParseWalSync and WalSyncName alike.
constexpr EnumName<WalSync> kWalSyncNames[] = {
    {WalSync::kAlways, "always"}, {WalSync::kInterval, "interval"}, {WalSync::kNever, "never"}};

}  // namespace

absl::StatusOr<WalSync> ParseWalSync(const std::string& text) {
  if (std::optional<WalSync> sync = ValueOf(kWalSyncNames, text)) return *sync;
  return absl::InvalidArgumentError(
      absl::StrCat("flag --wal-sync is '", text, "', expected always, interval or never"));
}

const char* WalSyncName(WalSync sync) { return NameOf(kWalSyncNames, sync, "?"); }

std::string FindVersionedSegment(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return "";
  std::string found;
  while (dirent* e = ::readdir(d)) {
    uint64_t n = 0;
    if (!ParseSegmentName(e->d_name, &n)) continue;
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char magic[8];
    const bool versioned = ::pread(fd, magic, 8, 0) == 8 && std::memcmp(magic, kSegmentMagic, 8) == 0;
    ::close(fd);
    if (versioned) {
      found = path;
      break;
    }
  }
  ::closedir(d);
  return found;
}

std::string EncodeWalRecord(WalRecordType type, uint64_t sequence, const std::string& payload) {
  std::string out(kWalHeaderBytes + payload.size(), '\0');
  StoreLe32(out.data() + 4, static_cast<uint32_t>(payload.size()));
  out[8] = static_cast<char>(type);
  StoreLe64(out.data() + 9, sequence);
  std::memcpy(out.data() + kWalHeaderBytes, payload.data(), payload.size());
  StoreLe32(out.data(), crc32c::Mask(crc32c::Value(out.data() + 8, out.size() - 8)));
  return out;
}

absl::Status ParseWalRecord(const char* data, size_t size, WalRecord* record, size_t* record_bytes) {
  if (size < kWalHeaderBytes) return absl::DataLossError("incomplete header");
  const uint32_t length = LoadLe32(data + 4);
  if (length > kWalMaxPayloadBytes) return absl::DataLossError(absl::StrCat("implausible length ", length));
  if (size - kWalHeaderBytes < length) return absl::DataLossError("payload runs past end");
  const uint32_t expected = crc32c::Unmask(LoadLe32(data));
  const uint32_t actual = crc32c::Value(data + 8, kWalHeaderBytes - 8 + length);
  if (expected != actual) return absl::DataLossError("crc mismatch");
  const auto type = static_cast<uint8_t>(data[8]);
  // The CRC matched, so the type byte is what a writer meant: a newer writer, not damage.
  if (type < 1 || type > kWalMaxKnownRecordType)
    return absl::UnimplementedError(absl::StrCat("unknown record type ", type));
  record->type = static_cast<WalRecordType>(type);
  record->sequence = LoadLe64(data + 9);
  record->payload.assign(data + kWalHeaderBytes, length);
  *record_bytes = kWalHeaderBytes + length;
  return absl::OkStatus();
}

struct Wal::MetricSeries {
  prometheus::Counter* bytes = nullptr;
  prometheus::Counter* records_batch = nullptr;
  prometheus::Counter* records_model = nullptr;
  prometheus::Counter* failures = nullptr;
  prometheus::Histogram* fsync = nullptr;
  prometheus::Gauge* recovery_seconds = nullptr;
  prometheus::Gauge* recovered_records = nullptr;
};

Wal::Wal(WalOptions options) : options_(std::move(options)) {}

Wal::~Wal() {
  if (interval_sync_) interval_sync_->Stop();
  absl::MutexLock lock(&mu_);
  while (syncing_) sync_cv_.Wait(&mu_);
  if (fd_ >= 0) {
    if (durable_ < next_sequence_ - 1 && options_.sync != WalSync::kNever) (void)::fdatasync(fd_);
    ::close(fd_);
    fd_ = -1;
  }
}

absl::StatusOr<std::unique_ptr<Wal>> Wal::Open(const WalOptions& options, uint64_t after_sequence,
                                               const Visitor& visitor, WalRecoveryReport* report,
                                               const std::shared_ptr<prometheus::Registry>& registry) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const auto start = std::chrono::steady_clock::now();
  WalRecoveryReport local;
  WalRecoveryReport& rep = report ? *report : local;
  rep = WalRecoveryReport{};
  if (::mkdir(options.dir.c_str(), 0775) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create WAL directory ", options.dir, ": ", Errno(errno)));
  }
  auto wal = std::unique_ptr<Wal>(new Wal(options));
  std::vector<Segment> recovered;  // becomes segments_

  // Segments in numeric order.
  std::vector<uint64_t> numbers;
  DIR* d = ::opendir(options.dir.c_str());
  if (!d) return absl::InternalError(absl::StrCat("cannot list WAL directory ", options.dir, ": ", Errno(errno)));
  uint64_t max_number = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    uint64_t n = 0;
    if (ParseSegmentName(name, &n)) numbers.push_back(n);
    // *.log.corrupt* and *.log.dropped* keep their number reserved so a new segment never
    // collides with them.
    size_t dot = name.find(".log.corrupt");
    if (dot == std::string::npos) dot = name.find(".log.dropped");
    if (dot != std::string::npos && ParseSegmentName(name.substr(0, dot + 4), &n)) max_number = std::max(max_number, n);
  }
  ::closedir(d);
  std::sort(numbers.begin(), numbers.end());
  if (!numbers.empty()) max_number = std::max(max_number, numbers.back());
  // Never reuse the number of a segment the manifest knew, even if it is gone now.
  max_number = std::max(max_number, options.expected_last_segment);

  // Segments the manifest lists must all be there: a missing one is acknowledged data gone.
  bool missing_prefix = false;
  bool missing_tail = false;    // newer segments than any present are gone (accepted)
  bool missing_middle = false;  // segments gone with a present one after them
  std::string missing_listed;   // what is missing, for the messages below
  if (options.expected_last_segment > 0) {
    std::vector<uint64_t> missing;
    for (uint64_t n = options.expected_first_segment; n <= options.expected_last_segment; ++n) {
      if (!std::binary_search(numbers.begin(), numbers.end(), n)) missing.push_back(n);
    }
    rep.missing_segments = missing.size();
    // Only older segments missing (all below the first one present): what they held is lost
    // only if the state still needs it, which the log's first sequence tells after reading
    // (require_from_sequence below). Any other missing segment held records the state needs.
    missing_prefix = !missing.empty() && !numbers.empty() && missing.back() < numbers.front();
    // Missing segments with a present one after them: the sequence gap they leave is found while
    // reading, and is a loss only if the snapshot in use does not cover it (decided there).
    missing_middle = !missing.empty() && !missing_prefix && !numbers.empty() && missing.back() < numbers.back();
    if (missing_middle) {
      missing_listed = absl::StrCat(missing.size(), " WAL segment(s) listed in the manifest are missing from ",
                                    options.dir, " (", SegmentName(missing.front()),
                                    missing.size() > 1 ? absl::StrCat(" .. ", SegmentName(missing.back())) : "", ")");
    } else if (!missing.empty() && !missing_prefix) {
      const std::string what = absl::StrCat(missing.size(), " WAL segment(s) listed in the manifest are missing from ",
                                            options.dir, " (", SegmentName(missing.front()),
                                            missing.size() > 1 ? absl::StrCat(" .. ", SegmentName(missing.back())) : "",
                                            "): the records they held are lost");
      if (!options.accept_data_loss) return absl::FailedPreconditionError(what);
      std::cerr << "cmestreamd: WAL recovery: DATA LOSS accepted: " << what << "\n";
      rep.data_loss.push_back(what);
      missing_listed = what;
      missing_tail = numbers.empty() || missing.back() > numbers.back();
    } else if (missing_prefix) {
      missing_listed = absl::StrCat(missing.size(), " older WAL segment(s) listed in the manifest are missing from ",
                                    options.dir, " (", SegmentName(missing.front()),
                                    missing.size() > 1 ? absl::StrCat(" .. ", SegmentName(missing.back())) : "", ")");
    }
  }

  if (options.progress) {
    uint64_t total = 0;
    for (uint64_t n : numbers)
      total += CountRecordsAfter(absl::StrCat(options.dir, "/", SegmentName(n)), after_sequence);
    options.progress->total = total;
    options.progress->replayed = 0;
    options.progress->phase = RecoveryProgress::kReplay;
  }

  uint64_t prev_sequence = 0;
  std::string data;
  WalRecord record;
  bool stop = false;
  for (size_t si = 0; si < numbers.size() && !stop; ++si) {
    Segment seg;
    seg.number = numbers[si];
    seg.path = absl::StrCat(options.dir, "/", SegmentName(seg.number));
    if (absl::Status s = files::ReadFile(seg.path, &data); !s.ok()) return s;
    ++rep.segments;
    // "Last" for torn-tail purposes: no later segment holds a record byte (a crash can leave
    // the next segment created, with its header, before anything was written to it).
    bool last_segment = true;
    for (size_t sj = si + 1; sj < numbers.size() && last_segment; ++sj) {
      struct stat st;
      const std::string p = absl::StrCat(options.dir, "/", SegmentName(numbers[sj]));
      if (::stat(p.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > kWalSegmentHeaderBytes)
        last_segment = false;
    }
    size_t pos = 0;
    // The segment header (version 1) or none (version 0: records from offset 0).
    if (data.size() >= 8 && std::memcmp(data.data(), kSegmentMagic, 8) == 0) {
      if (data.size() < kWalSegmentHeaderBytes) {
        if (!last_segment) {
          return absl::FailedPreconditionError(
              absl::StrCat(seg.path, ": truncated segment header, and later segments exist"));
        }
        data.clear();  // a crash while creating the newest segment: nothing in it was acknowledged
        if (absl::Status s = files::TruncateAndSync(seg.path, 0); !s.ok()) return s;
      } else {
        const bool header_ok = crc32c::Unmask(LoadLe32(data.data() + 12)) == crc32c::Value(data.data(), 12);
        if (!header_ok && !options.accept_data_loss) {
          return absl::FailedPreconditionError(absl::StrCat(
              seg.path,
              ": damaged segment header (checksum); with --accept-data-loss its records are read as format "
              "version ",
              kWalFormatVersion, ", each checked by its own checksum"));
        }
        if (!header_ok) {
          // The magic matched and the checksum did not: damage, not a newer writer (a newer
          // writer's header checks). The records after it carry their own checksums. The header
          // is rewritten (the damaged file kept beside it), so the next start needs no flag.
          const std::string saved = absl::StrCat(seg.path, ".corrupt.", static_cast<long long>(std::time(nullptr)));
          if (absl::Status s = files::CopyFileSynced(seg.path, saved); !s.ok()) return s;
          const std::string header = SegmentHeader();
          const int fd = ::open(seg.path.c_str(), O_WRONLY | O_CLOEXEC);
          const bool rewritten = fd >= 0 &&
                                 ::pwrite(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()) &&
                                 ::fdatasync(fd) == 0;
          const int err = errno;
          if (fd >= 0) ::close(fd);
          if (!rewritten) {
            return absl::InternalError(
                absl::StrCat("cannot rewrite the segment header of ", seg.path, ": ", Errno(err)));
          }
          const std::string what =
              absl::StrCat(seg.path, ": damaged segment header (checksum); its records were read as format version ",
                           kWalFormatVersion,
                           ", each checked by its own checksum, and the header rewritten (the "
                           "damaged file is kept as ",
                           saved, ")");
          std::cerr << "cmestreamd: WAL recovery: warning (--accept-data-loss): " << what << "\n";
          rep.skipped_damage.push_back(what);
        }
        const uint32_t version = header_ok ? LoadLe32(data.data() + 8) : kWalFormatVersion;
        if (version > kWalFormatVersion) {
          return absl::FailedPreconditionError(absl::StrCat(
              seg.path, ": WAL format version ", version, " was written by a newer cmestreamd (this one reads 0..",
              kWalFormatVersion, "); refusing to start: run the newer version"));
        }
        pos = kWalSegmentHeaderBytes;
      }
    }
    seg.header_bytes = pos;
    std::string problem;
    uint64_t next_sequence = 0;        // of the first valid record after a bad one (0: none)
    bool gap_at_valid_record = false;  // the problem is records missing, not damaged bytes
    while (pos < data.size()) {
      size_t n = 0;
      absl::Status s = ParseWalRecord(data.data() + pos, data.size() - pos, &record, &n);
      if (s.code() == absl::StatusCode::kUnimplemented) {
        return absl::FailedPreconditionError(absl::StrCat(
            seg.path, " offset ", pos, ": ", s.message(), " at sequence ", LoadLe64(data.data() + pos + 9),
            " (valid checksum: written by a newer cmestreamd?); refusing to start rather than skip it: run the "
            "version that wrote it"));
      }
      bool sequence_gap = false;
      if (s.ok() && prev_sequence != 0 && record.sequence != prev_sequence + 1) {
        s = absl::DataLossError(absl::StrCat("sequence ", record.sequence, ", expected ", prev_sequence + 1));
        sequence_gap = record.sequence > prev_sequence + 1;
      }
      if (sequence_gap && record.sequence - 1 <= after_sequence) {
        // Records missing, but all of them older than the snapshot being replayed from: the
        // state does not need them (RocksDB and PostgreSQL start at the checkpoint too).
        const std::string what = CoveredWarning(
            missing_listed.empty() ? absl::StrCat(seg.path, " offset ", pos, ": records ", prev_sequence + 1, "..",
                                                  record.sequence - 1, " are missing")
                                   : absl::StrCat(missing_listed, ": records ", prev_sequence + 1, "..",
                                                  record.sequence - 1, " are missing"),
            after_sequence);
        std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
        rep.skipped_damage.push_back(what);
        s = absl::OkStatus();
        sequence_gap = false;
        missing_listed.clear();
      }
      if (sequence_gap) {  // a valid record, but records before it are missing
        next_sequence = record.sequence;
        problem = std::string(s.message());
        gap_at_valid_record = true;
        break;
      }
      if (!s.ok()) {
        // Damaged bytes followed, in this segment, by the very next record: nothing that was
        // appended is lost (garbage between records, not a record). Skip them with a warning;
        // the file keeps them for inspection.
        size_t next_offset = 0;
        next_sequence = 0;
        FindNextValidRecord(data, pos + 1, prev_sequence, &next_sequence, &next_offset);
        if (next_sequence != 0 && prev_sequence != 0 && next_sequence == prev_sequence + 1) {
          const std::string what = absl::StrCat(seg.path, " offset ", pos, ": ", next_offset - pos, " damaged bytes (",
                                                s.message(), ") skipped; the next record (sequence ", next_sequence,
                                                ") follows without a gap, so no record is lost");
          std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
          rep.skipped_damage.push_back(what);
          pos = next_offset;
          continue;
        }
        if (next_sequence != 0 && next_sequence - 1 <= after_sequence) {
          const std::string what =
              CoveredWarning(absl::StrCat(seg.path, " offset ", pos, ": ", next_offset - pos, " damaged bytes (",
                                          s.message(), "); the next valid record has sequence ", next_sequence,
                                          ", so records ", FirstDamaged(data, pos, prev_sequence, next_sequence), "..",
                                          next_sequence - 1, " are damaged"),
                             after_sequence);
          std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
          rep.skipped_damage.push_back(what);
          prev_sequence = next_sequence - 1;  // the gap is accounted for: no second warning
          pos = next_offset;
          continue;
        }
        problem = std::string(s.message());
        break;
      }
      if (prev_sequence == 0 && options.require_from_sequence > 0 && record.sequence > options.require_from_sequence) {
        const std::string what =
            absl::StrCat("the write-ahead log in ", options.dir, " starts at sequence ", record.sequence,
                         " but the state needs "
                         "records from ",
                         options.require_from_sequence, ": records ", options.require_from_sequence, "..",
                         record.sequence - 1, " are gone");
        if (!options.accept_data_loss) {
          return absl::FailedPreconditionError(missing_listed.empty() ? what
                                                                      : absl::StrCat(missing_listed, ": ", what));
        }
        std::cerr << "cmestreamd: WAL recovery: DATA LOSS accepted: " << what << "\n";
        rep.data_loss.push_back(what);
        rep.lost_unreadable.emplace_back(options.require_from_sequence, record.sequence - 1);
      }
      record.segment = seg.path;
      record.offset = pos;
      if (record.sequence > after_sequence && visitor) {
        if (absl::Status v = visitor(record); !v.ok()) {
          return absl::Status(v.code(), absl::StrCat("WAL replay of ", seg.path, " offset ", pos, " (sequence ",
                                                     record.sequence, "): ", v.message()));
        }
        ++rep.records_visited;
        if (options.progress) options.progress->replayed.fetch_add(1, std::memory_order_relaxed);
      }
      if (seg.first_sequence == 0) seg.first_sequence = record.sequence;
      seg.last_sequence = record.sequence;
      if (rep.first_sequence == 0) rep.first_sequence = record.sequence;
      prev_sequence = record.sequence;
      ++rep.records;
      rep.bytes += n;
      pos += n;
    }
    seg.bytes = pos;
    if (problem.empty()) {
      recovered.push_back(seg);
      continue;
    }
    // A bad record at `pos` (see wal.h RECOVERY): torn tail or acknowledged data lost.
    // Valid records in later segments mean the damage is not a torn last write.
    for (size_t sj = si + 1; sj < numbers.size() && next_sequence == 0; ++sj) {
      std::string later;
      if (!files::ReadFile(absl::StrCat(options.dir, "/", SegmentName(numbers[sj])), &later).ok()) continue;
      const size_t from = later.size() >= kWalSegmentHeaderBytes && std::memcmp(later.data(), kSegmentMagic, 8) == 0
                              ? kWalSegmentHeaderBytes
                              : 0;
      size_t unused = 0;
      FindNextValidRecord(later, from, prev_sequence, &next_sequence, &unused);
    }
    if (next_sequence != 0 && prev_sequence != 0 && next_sequence == prev_sequence + 1) {
      // Damage at the end of a closed segment, and the next segment starts with the very next
      // record: nothing lost (a segment is closed after a complete record).
      const std::string what = absl::StrCat(seg.path, " offset ", pos, ": ", data.size() - pos,
                                            " damaged bytes at the end of a closed segment (", problem,
                                            ") skipped; the next segment continues at sequence ", next_sequence);
      std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
      rep.skipped_damage.push_back(what);
      recovered.push_back(seg);
      continue;
    }
    if (!gap_at_valid_record && next_sequence != 0 && next_sequence - 1 <= after_sequence) {
      // Damage at the end of a segment whose lost records the snapshot in use covers.
      const std::string what = CoveredWarning(
          absl::StrCat(seg.path, " offset ", pos, ": ", data.size() - pos, " damaged bytes (", problem,
                       "); the next valid record has sequence ", next_sequence, ", so records ",
                       FirstDamaged(data, pos, prev_sequence, next_sequence), "..", next_sequence - 1, " are damaged"),
          after_sequence);
      std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
      rep.skipped_damage.push_back(what);
      prev_sequence = next_sequence - 1;  // the next segment continues without a second warning
      recovered.push_back(seg);
      continue;
    }
    const bool complete = RecordIsComplete(data, pos);
    // An all-zero header was never written by us (type 0 does not exist): its sector did not
    // reach the disk, whatever came after it.
    const bool zero_header = complete && std::all_of(data.begin() + static_cast<std::ptrdiff_t>(pos),
                                                     data.begin() + static_cast<std::ptrdiff_t>(pos + kWalHeaderBytes),
                                                     [](char c) { return c == 0; });
    // A record that seems to run past the end of the file, but whose checksum matches the bytes
    // up to the end: it was written whole and only its length field is damaged (item of the
    // fault table "damage inside the last record"), not a write cut short.
    const bool whole_but_length_damaged =
        !complete && data.size() - pos >= kWalHeaderBytes &&
        crc32c::Unmask(LoadLe32(data.data() + pos)) == crc32c::Value(data.data() + pos + 8, data.size() - pos - 8);
    if (whole_but_length_damaged)
      problem = "length field damaged; the checksum matches the bytes to the end of the file";
    const bool torn = next_sequence == 0 && last_segment && !whole_but_length_damaged &&
                      (!complete || zero_header || AllZero(data, pos) || ZeroFilledFromSector(data, pos));
    const uint64_t dropped_here = data.size() - pos;
    rep.bytes_dropped = dropped_here;
    if (torn) {
      rep.torn_tail = true;
      rep.problem = absl::StrCat(seg.path, " offset ", pos, ": torn tail record (", problem, "); cut, ", dropped_here,
                                 " bytes dropped");
      std::cerr << "cmestreamd: WAL recovery: " << rep.problem << "\n";
    } else {
      // A gap at a valid record is records missing (a deleted segment, typically), not damage:
      // the bytes here are intact and are named so (never *.corrupt).
      const std::string missing_what =
          missing_listed.empty()
              ? absl::StrCat(seg.path, " offset ", pos, ": records ", prev_sequence + 1, "..", next_sequence - 1,
                             " are missing (", problem, ")")
              : absl::StrCat(missing_listed, ": records ", prev_sequence + 1, "..", next_sequence - 1, " are missing (",
                             seg.path, " continues at sequence ", next_sequence, ")");
      const std::string what =
          gap_at_valid_record
              ? absl::StrCat(missing_what, ", so records ", prev_sequence + 1, "..", next_sequence - 1, " are lost")
          : next_sequence == 0
              ? absl::StrCat(seg.path, " offset ", pos, ": the last record (sequence ", prev_sequence + 1,
                             ") is complete but damaged (", problem,
                             "); it was written whole, so it may have been acknowledged")
              : absl::StrCat(seg.path, " offset ", pos, ": damaged record (", problem,
                             "); the next valid record has "
                             "sequence ",
                             next_sequence, ", so records ", prev_sequence + 1, "..", next_sequence - 1, " are lost");
      if (!options.accept_data_loss) {
        return absl::FailedPreconditionError(absl::StrCat(what, "; refusing to start with acknowledged data missing"));
      }
      rep.corrupt = true;
      // Point in time: everything from here on is dropped, not only the damaged record. Read
      // what can be read of it for the per-model report (before the files are renamed).
      uint64_t expected = prev_sequence + 1;
      const bool here_intact =
          CollectDropped(data, pos, &expected, options.on_dropped_record, &rep.lost_unreadable) && gap_at_valid_record;
      std::vector<bool> later_intact;
      for (size_t sj = si + 1; sj < numbers.size(); ++sj) {
        std::string later;
        if (!files::ReadFile(absl::StrCat(options.dir, "/", SegmentName(numbers[sj])), &later).ok()) {
          later_intact.push_back(false);
          continue;
        }
        const size_t from = later.size() >= kWalSegmentHeaderBytes && std::memcmp(later.data(), kSegmentMagic, 8) == 0
                                ? kWalSegmentHeaderBytes
                                : 0;
        later_intact.push_back(CollectDropped(later, from, &expected, options.on_dropped_record, &rep.lost_unreadable));
      }
      // Said once, as what happens: the records named above and every valid one after them.
      const std::string dropped =
          gap_at_valid_record
              ? absl::StrCat(missing_what, "; recovery stops there (point in time), so records ", prev_sequence + 1,
                             "..", std::max(expected - 1, prev_sequence + 1), " are dropped")
              : absl::StrCat(seg.path, " offset ", pos, ": damaged record (", problem,
                             "); recovery stops before it (point in time), so records ", prev_sequence + 1, "..",
                             std::max(expected - 1, prev_sequence + 1), " are dropped");
      rep.data_loss.push_back(dropped);
      // Damaged files are kept as *.corrupt.TIME; intact ones that recovery does not replay (they
      // follow the point in time) as *.dropped.TIME, so nobody takes them for damage.
      const auto kept_name = [](const std::string& path, bool intact) {
        return absl::StrCat(path, intact ? ".dropped." : ".corrupt.", static_cast<long long>(std::time(nullptr)));
      };
      const std::string saved = kept_name(seg.path, here_intact);
      if (absl::Status s = files::CopyFileSynced(seg.path, saved); !s.ok()) return s;
      int renamed_corrupt = 0, renamed_dropped = 0;
      for (size_t sj = si + 1; sj < numbers.size(); ++sj) {
        const std::string p = absl::StrCat(options.dir, "/", SegmentName(numbers[sj]));
        struct stat st;
        if (::stat(p.c_str(), &st) == 0) rep.bytes_dropped += static_cast<uint64_t>(st.st_size);
        const bool intact = later_intact[sj - si - 1];
        const std::string q = kept_name(p, intact);
        if (::rename(p.c_str(), q.c_str()) != 0) {
          return absl::InternalError(absl::StrCat("cannot rename ", p, " to ", q, ": ", Errno(errno)));
        }
        ++(intact ? renamed_dropped : renamed_corrupt);
      }
      rep.problem = absl::StrCat(
          dropped,
          "; DATA LOSS accepted (--accept-data-loss): recovery stopped there (point in "
          "time: sequence ",
          prev_sequence, "), ", rep.bytes_dropped, " bytes not applied, kept in ", saved,
          renamed_dropped > 0 ? absl::StrCat("; ", renamed_dropped, " later intact segment(s) renamed *.dropped.*")
                              : "",
          renamed_corrupt > 0 ? absl::StrCat("; ", renamed_corrupt, " later damaged segment(s) renamed *.corrupt.*")
                              : "");
      std::cerr << "cmestreamd: WAL recovery ERROR: " << rep.problem << "\n";
      missing_listed.clear();
    }
    if (absl::Status s = files::TruncateAndSync(seg.path, pos); !s.ok()) return s;
    recovered.push_back(seg);
    stop = true;
  }
  if (options.require_through_sequence > 0 && prev_sequence < options.require_through_sequence) {
    const std::string what = absl::StrCat("the write-ahead log in ", options.dir, " ends at sequence ", prev_sequence,
                                          " but the manifest's newest "
                                          "snapshot covered sequence ",
                                          options.require_through_sequence, ": records ", prev_sequence + 1, "..",
                                          options.require_through_sequence, " are gone");
    if (!options.accept_data_loss) {
      return absl::FailedPreconditionError(missing_listed.empty() ? what : absl::StrCat(missing_listed, ": ", what));
    }
    std::cerr << "cmestreamd: WAL recovery: DATA LOSS accepted: " << what << "\n";
    rep.data_loss.push_back(what);
    rep.lost_unreadable.emplace_back(prev_sequence + 1, options.require_through_sequence);
  }
  if (missing_tail && !stop) rep.lost_unreadable.emplace_back(prev_sequence + 1, 0);  // their count: unknown
  if (options.log_end_unknown && !missing_tail && !stop) {
    // Nothing lists the segments that must exist (the manifest is gone or damaged), so later
    // segments may have been deleted with it: how many records followed is unknown, not zero.
    rep.lost_unreadable.emplace_back(prev_sequence + 1, 0);
  }
  if (missing_middle && !missing_listed.empty() && !stop) {
    // The missing segments left no gap in the sequence: they held no record the log lacks.
    const std::string what = absl::StrCat(missing_listed, ": no sequence is missing from the log, so nothing is lost");
    std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
    rep.skipped_damage.push_back(what);
  }
  if (missing_prefix) {
    // Older segments are gone. Lost only if the state needs records older than the log's
    // first (then the check at the first record above has already refused or reported it).
    const uint64_t needed_from = std::max<uint64_t>(options.require_from_sequence, 1);
    if (rep.first_sequence == 0) {
      const std::string what =
          absl::StrCat(missing_listed, " and no record is left in the log: the records they held are lost");
      if (!options.accept_data_loss) return absl::FailedPreconditionError(what);
      std::cerr << "cmestreamd: WAL recovery: DATA LOSS accepted: " << what << "\n";
      rep.data_loss.push_back(what);
      rep.lost_unreadable.emplace_back(needed_from, 0);
    } else if (rep.first_sequence <= needed_from) {
      const std::string what =
          absl::StrCat(missing_listed, "; they held only records before sequence ", rep.first_sequence,
                       ", and the state needs the log from sequence ", needed_from,
                       " on (the snapshot in use covers the rest), "
                       "so nothing is lost");
      std::cerr << "cmestreamd: WAL recovery: warning: " << what << "\n";
      rep.skipped_damage.push_back(what);
    }
  }
  if (absl::Status s = files::FsyncDir(options.dir); !s.ok()) return s;
  rep.last_sequence = prev_sequence;
  {
    // Not shared yet; the lock only states what the fields are guarded by.
    absl::MutexLock lock(&wal->mu_);
    wal->segments_ = std::move(recovered);
    wal->next_sequence_ = std::max(prev_sequence, after_sequence) + 1;
    wal->durable_ = wal->next_sequence_ - 1;  // what recovery read is on disk (segments truncated + synced)
    wal->next_segment_number_ = max_number + 1;
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (registry) {
    auto m = std::make_unique<MetricSeries>();
    m->bytes = &CounterFamily(*registry, "cmestream_wal_bytes_total", "Bytes appended to the write-ahead log").Add({});
    auto& records =
        CounterFamily(*registry, "cmestream_wal_records_total", "Records appended to the write-ahead log, by kind");
    m->records_batch = &records.Add({{"kind", "batch"}});
    m->records_model = &records.Add({{"kind", "model"}});
    m->failures = &CounterFamily(*registry, "cmestream_wal_append_failures_total",
                                 "Appends refused because a write or fsync failed (nothing applied)")
                       .Add({});
    m->fsync =
        &HistogramFamily(*registry, "cmestream_wal_fsync_seconds", "Latency of one fdatasync of the write-ahead log")
             .Add({},
                  prometheus::Histogram::BucketBoundaries{1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1});
    auto& gauges = GaugeFamily(*registry, "cmestream_wal_recovery", "Last recovery: seconds spent, records replayed");
    m->recovery_seconds = &gauges.Add({{"what", "seconds"}});
    m->recovered_records = &gauges.Add({{"what", "records"}});
    m->recovery_seconds->Set(rep.seconds);
    m->recovered_records->Set(static_cast<double>(rep.records_visited));
    wal->metrics_ = std::move(m);
  }
  if (options.sync == WalSync::kInterval) {
    wal->interval_sync_ = std::make_unique<PeriodicThread>(
        absl::Milliseconds(options.sync_interval_ms), [w = wal.get()] { w->SyncPending(); }, "cme-wal-sync");
    wal->interval_sync_->Start();
  }
  return wal;
}

absl::Status Wal::OpenNewSegment() {
  Segment seg;
  seg.number = next_segment_number_++;
  seg.path = absl::StrCat(options_.dir, "/", SegmentName(seg.number));
  fd_ = ::open(seg.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0664);
  if (fd_ < 0) return AppendError(errno, "cannot create segment", seg.path);
  const auto fail = [&](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(seg.path.c_str());
    return s;
  };
  // The format version comes first, so a reader of another version never guesses.
  const std::string header = SegmentHeader();
  if (const int err = files::WriteAll(fd_, header.data(), header.size()); err != 0) {
    return fail(AppendError(err, "write of the segment header to", seg.path));
  }
  if (options_.sync != WalSync::kNever && ::fdatasync(fd_) != 0) {
    return fail(AppendError(errno, "fdatasync of", seg.path));
  }
  // The new file's directory entry must survive a crash too.
  if (absl::Status s = files::FsyncDir(options_.dir); !s.ok()) {
    return fail(absl::UnavailableError(absl::StrCat("write-ahead log append failed: ", s.message())));
  }
  seg.header_bytes = header.size();
  seg.bytes = header.size();
  segments_.push_back(seg);
  // The manifest lists it before any record in it can be acknowledged.
  if (options_.on_segments_changed) {
    if (absl::Status s = options_.on_segments_changed(segments_.front().number, seg.number); !s.ok()) {
      segments_.pop_back();
      return fail(absl::UnavailableError(absl::StrCat("write-ahead log append failed: cannot record segment ", seg.path,
                                                      " in the manifest: ", s.message())));
    }
  }
  return absl::OkStatus();
}

absl::Status Wal::SyncLocked() {
  const uint64_t target = next_sequence_ - 1;
  if (fd_ < 0 || durable_ >= target) return absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  if (::fdatasync(fd_) != 0) {
    const int err = errno;
    if (metrics_) metrics_->failures->Increment();
    failed_ = absl::UnavailableError(absl::StrCat("write-ahead log fdatasync of ", segments_.back().path,
                                                  " failed: ", Errno(err),
                                                  "; the log refuses further appends until the daemon "
                                                  "is restarted"));
    sync_cv_.SignalAll();
    return failed_;
  }
  if (metrics_) metrics_->fsync->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  durable_ = target;
  sync_cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status Wal::SyncThrough(uint64_t sequence) {
  for (;;) {
    if (durable_ >= sequence) return absl::OkStatus();
    if (!failed_.ok()) return failed_;
    if (syncing_) {  // follower: the running fdatasync may cover us; if not, we lead the next one
      sync_cv_.Wait(&mu_);
      continue;
    }
    const uint64_t target = next_sequence_ - 1;  // everything written so far rides along
    if (fd_ < 0) {                               // every record is in a closed segment, synced when it was closed
      durable_ = target;
      continue;
    }
    // Leader: fdatasync on a duplicate descriptor without the lock, so other models keep
    // appending meanwhile; CloseActive waits for it (never two fdatasyncs at once, so a
    // failure can never be masked by a concurrent success: see GROUP COMMIT in wal.h).
    const int fd = ::dup(fd_);
    if (fd < 0) {
      failed_ =
          absl::UnavailableError(absl::StrCat("write-ahead log: cannot dup the segment descriptor: ", Errno(errno),
                                              "; the log refuses further appends until the "
                                              "daemon is restarted"));
      sync_cv_.SignalAll();
      return failed_;
    }
    const std::string path = segments_.back().path;
    syncing_ = true;
    mu_.Unlock();
    const auto t0 = std::chrono::steady_clock::now();
    const int injected = options_.before_group_sync ? options_.before_group_sync() : 0;
    const int rc = injected != 0 ? -1 : ::fdatasync(fd);
    const int err = injected != 0 ? injected : errno;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::close(fd);
    mu_.Lock();
    syncing_ = false;
    if (rc != 0) {
      if (metrics_) metrics_->failures->Increment();
      failed_ = absl::UnavailableError(absl::StrCat("write-ahead log fdatasync of ", path, " failed: ", Errno(err),
                                                    "; nothing written since the last successful fdatasync is "
                                                    "acknowledged; the log refuses further appends until the "
                                                    "daemon is restarted"));
    } else {
      durable_ = std::max(durable_, target);
      ++group_syncs_;
      if (metrics_) metrics_->fsync->Observe(seconds);
    }
    sync_cv_.SignalAll();
  }
}

absl::Status Wal::CloseActive() {
  while (syncing_) sync_cv_.Wait(&mu_);
  if (fd_ < 0) return absl::OkStatus();
  absl::Status s = options_.sync == WalSync::kNever ? absl::OkStatus() : SyncLocked();
  ::close(fd_);
  fd_ = -1;
  return s;
}

absl::StatusOr<uint64_t> Wal::AppendRecord(WalRecordType type, const std::string& payload) {
  if (!failed_.ok()) return failed_;
  if (payload.size() > kWalMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("record of ", payload.size(), " bytes exceeds the WAL limit"));
  }
  // Rotation happens before the next record rather than right after the one that filled the
  // segment, so the fdatasync that closes it can wait for a group sync still running.
  if (fd_ >= 0 && segments_.back().bytes >= options_.segment_bytes) {
    if (absl::Status c = CloseActive(); !c.ok()) return failed_.ok() ? c : failed_;
    if (!failed_.ok()) return failed_;
  }
  if (fd_ < 0) {
    if (absl::Status s = OpenNewSegment(); !s.ok()) {
      if (metrics_) metrics_->failures->Increment();
      return s;
    }
  }
  Segment& seg = segments_.back();
  const uint64_t sequence = next_sequence_;
  scratch_.resize(kWalHeaderBytes + payload.size());
  StoreLe32(scratch_.data() + 4, static_cast<uint32_t>(payload.size()));
  scratch_[8] = static_cast<char>(type);
  StoreLe64(scratch_.data() + 9, sequence);
  std::memcpy(scratch_.data() + kWalHeaderBytes, payload.data(), payload.size());
  StoreLe32(scratch_.data(), crc32c::Mask(crc32c::Value(scratch_.data() + 8, scratch_.size() - 8)));

  const int write_errno = files::WriteAll(fd_, scratch_.data(), scratch_.size());
  if (write_errno != 0) {
    const absl::Status out = AppendError(write_errno, "write to", seg.path);
    if (metrics_) metrics_->failures->Increment();
    // Roll back to the record start so the log stays a valid prefix; if even that fails,
    // refuse everything until a restart re-reads the disk.
    if (::ftruncate(fd_, static_cast<off_t>(seg.bytes)) != 0) {
      failed_ = absl::UnavailableError(absl::StrCat(out.message(),
                                                    "; the log refuses further appends until the "
                                                    "daemon is restarted"));
      sync_cv_.SignalAll();
    }
    return out;
  }
  seg.bytes += scratch_.size();
  if (seg.first_sequence == 0) seg.first_sequence = sequence;
  seg.last_sequence = sequence;
  ++next_sequence_;
  if (metrics_) {
    metrics_->bytes->Increment(static_cast<double>(scratch_.size()));
    (type == WalRecordType::kBatch ? metrics_->records_batch : metrics_->records_model)->Increment();
  }
  return sequence;
}

absl::Status Wal::WaitDurable(uint64_t sequence) {
  if (options_.sync != WalSync::kAlways) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return SyncThrough(sequence);
}

uint64_t Wal::group_syncs() const {
  absl::MutexLock lock(&mu_);
  return group_syncs_;
}

absl::StatusOr<uint64_t> Wal::WriteBatch(const std::string& model, const std::string& producer_id,
                                         uint64_t producer_offset_after, const PairBatch& batch, int64_t first,
                                         const std::string& episode_id) {
  absl::MutexLock lock(&mu_);
  v1::IngestBatch& b = batch_scratch_;
  b.Clear();
  b.set_model(model);
  b.set_producer_id(producer_id);
  const int64_t applied = batch.n - first;
  if (!producer_id.empty()) b.set_offset(producer_offset_after - static_cast<uint64_t>(applied));
  b.set_episode_id(episode_id);
  if (batch.end_warmup) b.set_end_warmup(true);
  if (batch.gap && first == 0) b.set_gap(true);
  if (batch.time != 0) b.set_received_unix_seconds(batch.time);
  if (batch.dictionary_cap != 0) b.set_dictionary_cap(batch.dictionary_cap);
  const int d = batch.dim;
  if (batch.discrete()) {
    if (batch.trajectory) {
      b.mutable_state_ids()->Add(batch.x_ids + first, batch.x_ids + batch.n + 1);  // ids first..n
    } else {
      b.mutable_x_ids()->Add(batch.x_ids + first, batch.x_ids + batch.n);
      b.mutable_y_ids()->Add(batch.y_ids + first, batch.y_ids + batch.n);
    }
  } else if (batch.trajectory) {
    b.mutable_states()->Add(batch.x + first * d, batch.x + (batch.n + 1) * d);  // states first..n
  } else {
    b.mutable_x()->Add(batch.x + first * d, batch.x + batch.n * d);
    b.mutable_y()->Add(batch.y + first * d, batch.y + batch.n * d);
  }
  std::string payload;
  if (!b.SerializeToString(&payload)) return absl::InternalError("cannot serialize a batch for the WAL");
  return AppendRecord(WalRecordType::kBatch, payload);
}

absl::StatusOr<uint64_t> Wal::AppendModelCreated(const v1::ModelConfig& config) {
  absl::MutexLock lock(&mu_);
  std::string payload;
  if (!config.SerializeToString(&payload)) return absl::InternalError("cannot serialize a model config for the WAL");
  return AppendDurable(WalRecordType::kModelCreated, payload);
}

absl::StatusOr<uint64_t> Wal::AppendModelDeleted(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return AppendDurable(WalRecordType::kModelDeleted, name);
}

absl::StatusOr<uint64_t> Wal::AppendModelImported(const std::string& name, const std::string& image) {
  absl::MutexLock lock(&mu_);
  std::string payload(4, '\0');
  StoreLe32(payload.data(), static_cast<uint32_t>(name.size()));
  payload += name;
  payload += image;
  return AppendDurable(WalRecordType::kModelImported, payload);
}

absl::StatusOr<uint64_t> Wal::AppendDurable(WalRecordType type, const std::string& payload) {
  absl::StatusOr<uint64_t> sequence = AppendRecord(type, payload);
  if (!sequence.ok() || options_.sync != WalSync::kAlways) return sequence;
  if (absl::Status s = SyncThrough(*sequence); !s.ok()) return s;
  return sequence;
}

absl::Status DecodeImportRecord(const std::string& payload, std::string* name, std::string* image) {
  if (payload.size() < 4) return absl::DataLossError("import record shorter than its name length");
  const uint32_t n = LoadLe32(payload.data());
  if (n == 0 || n > kMaxModelNameBytes || payload.size() - 4 < n) {
    return absl::DataLossError(absl::StrCat("import record has a bad name length ", n));
  }
  name->assign(payload.data() + 4, n);
  image->assign(payload.data() + 4 + n, payload.size() - 4 - n);
  return absl::OkStatus();
}

uint64_t Wal::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_ - 1;
}

absl::Status Wal::Rotate() {
  absl::MutexLock lock(&mu_);
  return CloseActive();
}

absl::Status Wal::Sync() {
  absl::MutexLock lock(&mu_);
  return SyncThrough(next_sequence_ - 1);
}

absl::StatusOr<int> Wal::DeleteSegmentsCoveredBy(uint64_t covered) {
  absl::MutexLock lock(&mu_);
  const size_t closed = fd_ >= 0 ? segments_.size() - 1 : segments_.size();
  // Only a prefix goes, so what remains is always the contiguous range the manifest records
  // (an empty segment left by a crash has last_sequence 0 and must not open a hole).
  std::vector<Segment> kept, doomed;
  size_t i = 0;
  for (; i < closed && segments_[i].last_sequence <= covered; ++i) doomed.push_back(segments_[i]);
  for (; i < segments_.size(); ++i) kept.push_back(segments_[i]);
  if (doomed.empty()) return 0;
  // The manifest stops listing them before they go: a crash in between leaves extra files
  // (harmless), never listed files that are missing (which would refuse the next start).
  if (options_.on_segments_changed) {
    const uint64_t first = kept.empty() ? 0 : kept.front().number;
    const uint64_t last = kept.empty() ? 0 : kept.back().number;
    if (absl::Status s = options_.on_segments_changed(first, last); !s.ok()) return s;
  }
  segments_ = kept;
  int deleted = 0;
  for (const Segment& s : doomed) {
    if (::unlink(s.path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot delete WAL segment ", s.path, ": ", Errno(errno)));
    }
    ++deleted;
  }
  if (absl::Status s = files::FsyncDir(options_.dir); !s.ok()) return s;
  return deleted;
}

std::vector<std::string> Wal::SegmentPaths() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const Segment& s : segments_) out.push_back(s.path);
  return out;
}

void Wal::SyncPending() {
  absl::MutexLock lock(&mu_);
  if (fd_ < 0 || durable_ >= next_sequence_ - 1 || syncing_) return;
  // The same leader path as group commit: outside the lock, appends go on meanwhile; a
  // failure is sticky.
  (void)SyncThrough(next_sequence_ - 1);
}

}  // namespace cmestream::service
