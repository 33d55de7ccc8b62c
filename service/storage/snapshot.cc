#include "service/storage/snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "service/engine/model_config.h"
#include "service/engine/wire_limits.h"
#include "service/storage/crc32c.h"
#include "service/storage/file_util.h"
#include "service/storage/manifest.h"
#include "service/storage/spool_file.h"

namespace cmestream::service {
namespace {

constexpr uint32_t kModelTag = io::Fourcc("MODL");
constexpr uint32_t kEvictedTag = io::Fourcc("EVCT");
constexpr uint32_t kSnapTag = io::Fourcc("SNAP");
constexpr uint32_t kExportTag = io::Fourcc("EXPT");
constexpr uint32_t kReferenceTag = io::Fourcc("EREF");
// File format versions: 1, every model a MODL object; 2 (daemon snapshots) adds an EVCT object
// after the MODL object of a model evicted at the cut (what it keeps in memory: Model's
// RESTART); 3 (daemon snapshots) writes such a model as an EREF object (a reference to its
// pinned eviction file) followed by its EVCT object, instead of its bytes. Exports and
// eviction files stay version 1 (self-contained: they never hold an EVCT or an EREF). This
// build reads 1, 2 and 3.
constexpr uint32_t kFormatVersion = 3;
constexpr uint32_t kSnapshotVersion = 3;
constexpr uint32_t kExportVersion = 1;
constexpr uint32_t kFirstVersionWithEvicted = 2;
constexpr uint32_t kFirstVersionWithReferences = 3;
constexpr uint32_t kEvictedVersion = 1;    // the EVCT object's own version
constexpr uint32_t kReferenceVersion = 1;  // the EREF object's own version
constexpr uint64_t kMaxPinNameBytes = 255;
// Threads that fsync a snapshot's newly referenced files at once (TakeNow, DURABILITY).
constexpr size_t kSyncThreads = 8;
// MODL object version = the learner's state version: 2 adds the spectral moments after the
// predictive accumulator. Version 1 objects load with a fresh spectral accumulator (its first
// epoch starts at the next pair; the spectrum serves once that epoch has data).
// Version 3 adds the lag statistics (docs/algorithms.md §8) after the spectral moments;
// version 1 and 2 objects load with fresh, empty lag statistics.
// Version 4 adds the open CME micro-batch run after the lag statistics (docs/algorithms.md
// §9.2); older objects load with an empty run (the next run starts at the stored pair count).
// Version 5 adds the frozen input scaler of a scaled model (ModelConfig.scale "auto",
// docs/algorithms.md §1.13) after the open run; an unscaled model's body is that of version 4,
// so its state digest did not change, and version 1-4 objects load unscaled (their configs
// have no `scale`, which NormalizeStoredModelConfig keeps as "none").
// Version 6 adds the forecast regression after the scaler (docs/algorithms.md §11); older objects
// load with an empty regression (it learns from the next pair on, first fit after 64 pairs).
// Version 7 adds the delay embedding's open episode of a model with delays (ModelConfig.delays,
// docs/algorithms.md §1.14) after the regression; a model without delays has the body of version
// 6 (same state digest), and version 1-6 objects cannot hold delays (their configs lack them).
// Version 8 adds the change alarms of a model with alarms on (ModelConfig.alarms, core/alarms/
// alarm_monitor.h) after the delay embedding; a model without alarms has the body of version 7
// (same state digest), and version 1-7 objects load without alarms (their configs lack them).
// Version 9 adds the frozen input reduction of a reduced model (ModelConfig.reduce, docs/
// algorithms.md §1.15) after the alarms; a model without has the body of version 8 (same state
// digest), and version 1-8 objects cannot hold a reduction (their configs lack `reduce`).
// Version 10 adds the model's failure (Model::failure: U64 WAL sequence and a string reason,
// 0 and "" for a healthy model) after the sigma selection; the learner's bytes are those of
// learner state version 9 (a failed model's are a fresh learner's: its state is not kept).
// Version 1-9 objects load as healthy models.
constexpr uint32_t kModelVersion = 10;
constexpr uint32_t kFirstVersionWithFailure = 10;
// The learner state version inside a MODL object of version v.
constexpr uint32_t LearnerVersionOf(uint32_t v) { return v >= kFirstVersionWithFailure ? 9 : v; }
static_assert(StreamingLearner::kStateVersion == 9,
              "a new learner state version is a new MODL version: document it here and in LearnerVersionOf");
constexpr size_t kHeaderBytes = 44;
constexpr size_t kFooterBytes = 4;
constexpr int64_t kMaxModels = 1000000;
// Every other bound comes from service/engine/wire_limits.h, the ones ingestion enforces.

uint64_t NowNanos() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

std::string Header(uint32_t kind, uint32_t models, uint64_t number, uint64_t covered) {
  io::Writer w;
  w.Bytes(kSnapshotMagic, 8);
  w.U32(kind);
  w.U32(kind == kSnapTag ? kSnapshotVersion : kExportVersion);
  w.U32(models);
  w.U64(number);
  w.U64(NowNanos());
  w.U64(covered);
  return w.Release();
}

std::string Footer(uint32_t crc) {
  io::Writer w;
  w.U32(crc32c::Mask(crc));
  return w.Release();
}

std::string ErrnoText() { return std::strerror(errno); }

absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = ErrnoText();
      return errno == ENOSPC || errno == EDQUOT || errno == EFBIG
                 ? absl::ResourceExhaustedError(absl::StrCat("writing snapshot ", path, ": ", why))
                 : absl::InternalError(absl::StrCat("writing snapshot ", path, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Writes `chunks` (produced one at a time by `next`, which returns false when done, or an
// error that abandons the file) to dir/name atomically: temp file in dir, fsync, rename,
// fsync(dir). The CRC footer is appended. On error the temp file is removed and nothing else
// changes.
absl::StatusOr<uint64_t> WriteAtomically(const std::string& dir, const std::string& name,
                                         const std::function<absl::StatusOr<bool>(std::string*)>& next,
                                         const std::function<absl::Status(const std::string&)>& verify = nullptr) {
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp");
  const std::string path = absl::StrCat(dir, "/", name);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0664);
  if (fd < 0) return absl::InternalError(absl::StrCat("creating snapshot ", tmp, ": ", ErrnoText()));
  uint32_t crc = 0;
  uint64_t bytes = 0;
  absl::Status status;
  std::string chunk;
  while (status.ok()) {
    absl::StatusOr<bool> more = next(&chunk);
    if (!more.ok()) status = more.status();
    if (!status.ok() || !*more) break;
    crc = crc32c::Extend(crc, chunk.data(), chunk.size());
    bytes += chunk.size();
    status = WriteAll(fd, chunk, tmp);
    std::string().swap(chunk);  // free the model's bytes before serializing the next one
  }
  if (status.ok()) status = WriteAll(fd, Footer(crc), tmp);
  bytes += kFooterBytes;
  if (status.ok() && ::fsync(fd) != 0) status = absl::InternalError(absl::StrCat("fsync of ", tmp, ": ", ErrnoText()));
  ::close(fd);
  // Read back from disk and decoded before it may replace anything (verify before prune).
  if (status.ok() && verify) status = verify(tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = absl::InternalError(absl::StrCat("renaming ", tmp, " to ", path, ": ", ErrnoText()));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  if (absl::Status s = files::FsyncDir(dir); !s.ok()) return s;
  return bytes;
}

bool ParseSnapshotName(const std::string& name, uint64_t* number) {
  // snapshot-<20 digits>.snap
  constexpr size_t kPrefix = 9, kDigits = 20;
  if (name.size() != kPrefix + kDigits + 5 || name.compare(0, kPrefix, "snapshot-") != 0 ||
      name.compare(kPrefix + kDigits, 5, ".snap") != 0) {
    return false;
  }
  uint64_t v = 0;
  for (size_t i = kPrefix; i < kPrefix + kDigits; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *number = v;
  return true;
}

std::string SnapshotName(uint64_t number) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "snapshot-%020llu.snap", static_cast<unsigned long long>(number));
  return buf;
}

// (number, path), ascending.
std::vector<std::pair<uint64_t, std::string>> ListSnapshots(const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    uint64_t n;
    if (ParseSnapshotName(e->d_name, &n)) out.emplace_back(n, absl::StrCat(dir, "/", e->d_name));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The stored config of a MODL object at file offset `begin` (for the name, before building).
absl::StatusOr<v1::ModelConfig> PeekConfig(std::string_view object, const std::string& source, uint64_t begin) {
  io::Reader r(object, source, begin);
  uint32_t version;
  if (!r.BeginObject(kModelTag, kModelVersion, "model", &version)) return r.status();
  const std::string text = r.String("model config", kMaxConfigBytes);
  if (!r.ok()) return r.status();
  v1::ModelConfig config;
  if (!config.ParseFromString(text)) return r.Fail("model config is not a valid ModelConfig message");
  return config;
}

// The head of a MODL body: everything before the learner's state.
struct ModelHeader {
  v1::ModelConfig config;  // normalized (NormalizeStoredModelConfig)
  uint64_t applied = 0;
  uint64_t batches = 0;
  std::map<std::string, uint64_t> offsets;
  v1::SigmaSelection sigma;
  std::optional<Model::Failure> failure;
};

// Reads the head of a MODL body of `version` (r just after the object's header): config (with
// `rename`, non-empty, as the new name of an import: an imported fork is a model of its own),
// applied sequence, batch count, producers' offsets, σ selection, and from version 10 the
// failure. One reader for Decode, the restart of an evicted model and the head a reference
// stores.
absl::Status ReadModelHeader(io::Reader& r, uint32_t version, const ConfigDefaults& defaults, const std::string& rename,
                             ModelHeader* h) {
  const std::string config_text = r.String("model config", kMaxConfigBytes);
  if (!r.ok()) return r.status();
  v1::ModelConfig stored;
  if (!stored.ParseFromString(config_text)) return r.Fail("model config is not a valid ModelConfig message");
  if (!rename.empty()) {
    stored.set_name(rename);
    stored.clear_fork_of();
    stored.clear_fork_index();
  }
  absl::StatusOr<v1::ModelConfig> config = NormalizeStoredModelConfig(stored, defaults);
  if (!config.ok()) {
    if (!rename.empty()) return config.status();
    return r.Fail(absl::StrCat("model config is invalid: ", config.status().message()));
  }
  h->config = *std::move(config);
  h->applied = r.U64("model applied sequence");
  h->batches = r.U64("model batches applied");
  const int64_t producers = r.Count("model producer count", 0, kMaxProducersPerModel);
  for (int64_t i = 0; i < producers && r.ok(); ++i) {
    std::string id = r.String("producer id", kMaxProducerIdBytes);
    h->offsets[std::move(id)] = r.U64("producer offset");
  }
  if (!h->sigma.ParseFromString(r.String("model sigma selection", kMaxConfigBytes)) && r.ok()) {
    return r.Fail("model sigma selection is not a valid SigmaSelection message");
  }
  if (!r.ok()) return r.status();
  if (version >= kFirstVersionWithFailure) {
    const uint64_t failed_at = r.U64("model failure sequence");
    std::string reason = r.String("model failure reason", kMaxConfigBytes);
    if (!r.ok()) return r.status();
    if (!reason.empty()) h->failure = Model::Failure{failed_at, std::move(reason)};
  }
  return absl::OkStatus();
}

// The version and head (ModelHeader's bytes) of a MODL object: what a reference stores.
absl::Status HeadOf(std::string_view object, const std::string& source, const ConfigDefaults& defaults,
                    uint32_t* version, std::string* head) {
  io::Reader r(object, source);
  if (!r.BeginObject(kModelTag, kModelVersion, "model", version)) return r.status();
  ModelHeader h;
  if (absl::Status s = ReadModelHeader(r, *version, defaults, "", &h); !s.ok()) return s;
  constexpr size_t kObjectHeader = 16;  // tag, version, length
  *head = std::string(object.substr(kObjectHeader, r.offset() - kObjectHeader));
  return absl::OkStatus();
}

// What an EREF object holds (format 3).
struct Reference {
  std::string model;
  std::string file;  // base name in the snapshot's pins directory
  uint64_t size = 0;
  uint32_t crc = 0;
  uint32_t model_version = 0;
  std::string head;
};

absl::Status ReadReference(std::string_view bytes, const std::string& source, uint64_t begin, Reference* ref) {
  io::Reader r(bytes, source, begin);
  uint32_t version = 0;
  if (!r.BeginObject(kReferenceTag, kReferenceVersion, "evicted model reference", &version)) return r.status();
  ref->model = r.String("referenced model name", kMaxConfigBytes);
  ref->file = r.String("referenced file name", kMaxPinNameBytes);
  ref->size = r.U64("referenced file size");
  ref->crc = r.U32("referenced file CRC32C");
  ref->model_version = r.U32("referenced model object version");
  ref->head = r.String("referenced model head", kMaxConfigBytes + kMaxProducersPerModel * (kMaxProducerIdBytes + 16));
  if (!r.ok()) return r.status();
  if (ref->file.empty() || ref->file == "." || ref->file == ".." || ref->file.find('/') != std::string::npos ||
      ref->file.find('\0') != std::string::npos) {
    return r.Fail(absl::StrCat("referenced file name '", ref->file, "' is not a file name"));
  }
  if (ref->model_version < 1 || ref->model_version > kModelVersion) {
    return r.Fail(absl::StrCat("referenced model object version ", ref->model_version,
                               " is not supported by this build (reads 1..", kModelVersion, ")"));
  }
  if (ref->size < kHeaderBytes + kFooterBytes)
    return r.Fail(absl::StrCat("referenced file size ", ref->size, " is too small"));
  if (!r.EndObject("evicted model reference")) return r.status();
  return absl::OkStatus();
}

std::string WriteReference(const std::string& model, const ModelSpill::FileRef& ref) {
  io::Writer w;
  const size_t h = w.BeginObject(kReferenceTag, kReferenceVersion);
  w.String(model);
  w.String(files::BaseName(ref.pin));
  w.U64(ref.size);
  w.U32(ref.crc);
  w.U32(ref.model_version);
  w.String(ref.head);
  w.EndObject(h);
  return w.Release();
}

// A pinned file is what its reference says: `size` bytes whose footer is the masked `crc`
// (a stat and a 4-byte read; the CRC itself is checked when the model is loaded back).
absl::Status CheckPinnedFile(const std::string& path, uint64_t size, uint32_t crc) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // DataLoss, not NotFound: the snapshot is there, a file it needs is not.
    return absl::DataLossError(absl::StrCat("the evicted model's file ", path, " cannot be opened: ", ErrnoText()));
  }
  struct stat st {};
  absl::Status status;
  unsigned char footer[kFooterBytes] = {};
  if (::fstat(fd, &st) != 0) {
    status = absl::DataLossError(absl::StrCat("cannot stat ", path, ": ", ErrnoText()));
  } else if (static_cast<uint64_t>(st.st_size) != size) {
    status = absl::DataLossError(
        absl::StrCat("the evicted model's file ", path, " is ", st.st_size, " bytes, its reference says ", size));
  } else if (::pread(fd, footer, kFooterBytes, static_cast<off_t>(size - kFooterBytes)) !=
             static_cast<ssize_t>(kFooterBytes)) {
    status = absl::DataLossError(absl::StrCat("cannot read the footer of ", path, ": ", ErrnoText()));
  } else {
    uint32_t stored = 0;
    for (size_t i = 0; i < kFooterBytes; ++i) stored |= static_cast<uint32_t>(footer[i]) << (8 * i);
    if (crc32c::Unmask(stored) != crc) {
      status = absl::DataLossError(absl::StrCat(
          "the evicted model's file ", path, " has CRC32C 0x", absl::Hex(crc32c::Unmask(stored), absl::kZeroPad8),
          " in its footer, its reference says 0x", absl::Hex(crc, absl::kZeroPad8)));
    }
  }
  ::close(fd);
  return status;
}

// Removes a pins directory and every pin in it (retention, a failed snapshot, a stray one).
void RemovePins(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink(absl::StrCat(dir, "/", name).c_str());
    }
    ::closedir(d);
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    std::fprintf(stderr, "cmestreamd: warning: cannot remove %s: %s\n", dir.c_str(), ErrnoText().c_str());
  }
}

}  // namespace

std::string PinsDirOf(const std::string& snapshot_path) {
  std::string base = snapshot_path;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".snap") == 0) base.resize(base.size() - 5);
  return base + ".pins";
}

// ---------------------------------------------------------------------------------------------
// One model

// The body of a MODL object. With `for_digest`, the parts that say where the state came from
// rather than what it is are left out (the name, the fork it is of, the WAL sequence it covers,
// the batch count), so an imported or renamed copy hashes like the original, and a fork like a
// model created with its config and fed the same pairs.
void ModelSnapshotCodec::WriteBody(io::Writer& w, const Model& m, bool for_digest) {
  if (for_digest) {
    v1::ModelConfig anonymous = m.config_;
    anonymous.clear_name();
    anonymous.clear_fork_of();
    anonymous.clear_fork_index();
    w.String(anonymous.SerializeAsString());
  } else {
    w.String(m.config_.SerializeAsString());
    w.U64(m.applied_sequence());
  }
  {
    absl::MutexLock stats_lock(&m.stats_mu_);
    if (!for_digest) w.U64(m.stats_.batches_applied);
    w.U64(m.producer_offsets_.size());
    for (const auto& [producer, offset] : m.producer_offsets_) {
      w.String(producer);
      w.U64(offset);
    }
  }
  w.String(SigmaSelectionProto(m.learner_->sigma_selection()).SerializeAsString());
  const std::optional<Model::Failure> failure = m.failure();
  if (!for_digest) {
    w.U64(failure ? failure->sequence : 0);
    w.String(failure ? failure->reason : "");
  }
  if (failure) {
    // The learner that failed is unusable and may not even read back: a fresh one stands in.
    StreamingLearner(LearnerOptionsFor(m.config_)).Serialize(w);
    return;
  }
  m.learner_->Serialize(w);
}

absl::StatusOr<ModelImage> ModelSnapshotCodec::Image(Model& m) {
  // Under the model's eviction lock: it is either resident (encoded now) or in its file (whose
  // MODL object is copied as it is: nothing was learned since it was written).
  absl::MutexLock evict_lock(&m.evict_mu_);
  if (m.evicted_path_.empty()) return EncodeResident(m);
  absl::StatusOr<std::string> bytes = m.spill_->ReadImage(m.evicted_path_);
  if (!bytes.ok()) {
    return absl::DataLossError(absl::StrCat("model '", m.name(), "' is evicted to ", m.evicted_path_,
                                            ", which cannot be read back: ", bytes.status().message()));
  }
  ModelImage image;
  image.name = m.name();
  image.applied_sequence = m.applied_sequence();
  image.bytes = *std::move(bytes);
  return image;
}

ModelImage ModelSnapshotCodec::Encode(Model& m) {
  absl::StatusOr<ModelImage> image = Image(m);
  if (image.ok()) return *std::move(image);
  std::cerr << "cmestreamd: " << image.status().message() << "\n";
  ModelImage empty;  // decodes as nothing: a snapshot holding it fails its verification
  empty.name = m.name();
  return empty;
}

absl::StatusOr<SnapshotPart> ModelSnapshotCodec::Part(Model& m, const std::string& pins_dir) {
  SnapshotPart part;
  absl::MutexLock evict_lock(&m.evict_mu_);
  if (m.evicted_path_.empty()) {
    part.image_ = EncodeResident(m);
    return part;
  }
  part.image_.name = m.name();
  part.image_.applied_sequence = m.applied_sequence();
  {
    // What the evicted model keeps in memory (RESTART): the digest, the counters, the input
    // scaling, the kept alarms.
    io::Writer w;
    const size_t h = w.BeginObject(kEvictedTag, kEvictedVersion);
    w.U64(m.evicted_digest_);
    {
      absl::MutexLock stats_lock(&m.stats_mu_);
      const Model::Stats st = m.stats_;  // a copy: the analysis does not follow a reference
      w.Bool(st.learner_ready);
      w.U64(st.samples);
      w.U64(st.pending_warmup);
      w.I32(st.dict_x);
      w.I32(st.dict_y);
      w.I32(st.spectral_basis);
      w.U64(st.forced);
      w.F64(st.forced_error_sum);
      w.F64(st.inverse_drift);
      w.U64(st.batches_applied);
      w.Bool(st.alarms);
      w.U64(st.alarms_scored);
      w.I64(st.armed_at);
      w.U64(st.alarms_total);
      w.U64(st.progress);
      w.F64(st.change_score);
      w.F64(st.change_threshold);
      w.String(st.alarm_note);
      w.String(m.published_scaling_.SerializeAsString());
    }
    w.Bool(m.evicted_alarms_.has_value());
    if (m.evicted_alarms_) {
      const Model::AlarmList& a = *m.evicted_alarms_;
      w.I64(a.armed_at);
      w.U64(a.dropped);
      w.U64(a.alarms.size());
      for (const AlarmRecord& r : a.alarms) {
        w.I64(r.index);
        w.F64(r.time);
        w.F64(r.score);
        w.F64(r.threshold);
        w.Ints(r.channels);
        w.U8(static_cast<uint8_t>(r.kind));
        w.U8(static_cast<uint8_t>(r.direction));
        w.I64(r.onset);
      }
    }
    w.EndObject(h);
    part.summary_ = w.Release();
  }
  absl::StatusOr<ModelSpill::FileRef> pin = m.spill_->Pin(m.evicted_path_, pins_dir);
  if (pin.ok()) {
    part.ref_ = *std::move(pin);
    part.spill_ = m.spill_;
    return part;
  }
  // No second name for it (e.g. a file system without hard links): its bytes now, as Image.
  std::cerr << "cmestreamd: warning: " << pin.status().message() << "; the snapshot copies the file\n";
  absl::StatusOr<std::string> bytes = m.spill_->ReadImage(m.evicted_path_);
  if (!bytes.ok()) {
    return absl::DataLossError(absl::StrCat("model '", m.name(), "' is evicted to ", m.evicted_path_,
                                            ", which cannot be read back: ", bytes.status().message()));
  }
  part.image_.bytes = *std::move(bytes);
  return part;
}

SnapshotPart& SnapshotPart::operator=(SnapshotPart&& o) noexcept {
  if (this != &o) {
    if (pinned() && !kept_ && spill_ != nullptr) spill_->Remove(ref_.pin);
    image_ = std::move(o.image_);
    summary_ = std::move(o.summary_);
    ref_ = std::move(o.ref_);
    spill_ = o.spill_;
    kept_ = o.kept_;
    o.ref_.pin.clear();
    o.spill_ = nullptr;
  }
  return *this;
}

SnapshotPart::~SnapshotPart() {
  if (pinned() && !kept_ && spill_ != nullptr) spill_->Remove(ref_.pin);
}

std::string SnapshotPart::TakeBytes() {
  if (!pinned()) return std::move(image_.bytes) + std::move(summary_);
  return WriteReference(image_.name, ref_) + std::move(summary_);
}

absl::StatusOr<bool> SnapshotPart::MakeDurable() {
  if (!pinned() || ref_.durable) return false;
  if (absl::Status s = spill_->MakeDurable(ref_); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("model '", image_.name, "': ", s.message()));
  }
  ref_.durable = true;
  return true;
}

absl::Status ModelSnapshotCodec::ReadSummary(io::Reader& r, Model::EvictedState* st) {
  uint32_t version = 0;
  if (!r.BeginObject(kEvictedTag, kEvictedVersion, "evicted model", &version)) return r.status();
  st->digest = r.U64("evicted digest");
  Model::Stats& s = st->stats;
  s.learner_ready = r.Bool("evicted learner ready");
  s.samples = r.U64("evicted samples");
  s.pending_warmup = r.U64("evicted pending warm-up");
  s.dict_x = r.I32In("evicted dictionary x", 0, 1 << 30);
  s.dict_y = r.I32In("evicted dictionary y", 0, 1 << 30);
  s.spectral_basis = r.I32In("evicted spectral basis", 0, 1 << 30);
  s.forced = r.U64("evicted forced compressions");
  s.forced_error_sum = r.F64("evicted forced error sum");
  s.inverse_drift = r.F64("evicted inverse drift");
  s.batches_applied = r.U64("evicted batches");
  s.alarms = r.Bool("evicted alarms on");
  s.alarms_scored = r.U64("evicted alarms scored");
  s.armed_at = r.I64("evicted armed at");
  s.alarms_total = r.U64("evicted alarms total");
  s.progress = r.U64("evicted progress");
  s.change_score = r.F64("evicted change score");
  s.change_threshold = r.F64("evicted change threshold");
  s.alarm_note = r.String("evicted alarm note", kMaxConfigBytes);
  const std::string scaling = r.String("evicted input scaling", kMaxConfigBytes);
  if (!r.ok()) return r.status();
  if (!st->scaling.ParseFromString(scaling)) return r.Fail("evicted input scaling is not a valid InputScaling message");
  if (r.Bool("evicted alarm list")) {
    Model::AlarmList a;
    a.armed_at = r.I64("evicted alarms armed at");
    a.dropped = r.U64("evicted alarms dropped");
    const int64_t n = r.Count("evicted alarm records", 0, AlarmMonitor::kMaxRecords);
    for (int64_t i = 0; i < n && r.ok(); ++i) {
      AlarmRecord rec;
      rec.index = r.I64("alarm index");
      rec.time = r.F64("alarm time");
      rec.score = r.F64("alarm score");
      rec.threshold = r.F64("alarm threshold");
      rec.channels = r.Ints("alarm channels", "alarm channel", 0, kMaxDim);
      const uint8_t kind = r.U8("alarm kind"), dir = r.U8("alarm direction");
      if (r.ok() && (kind > static_cast<uint8_t>(ChangeDetector::Kind::kSpike) || dir > 1)) {
        return r.Fail("alarm kind or direction out of range");
      }
      rec.kind = static_cast<ChangeDetector::Kind>(kind);
      rec.direction = static_cast<ChangeDetector::Direction>(dir);
      rec.onset = r.I64("alarm onset");
      a.alarms.push_back(std::move(rec));
    }
    st->alarms = std::move(a);
  }
  if (!r.EndObject("evicted model")) return r.status();
  return absl::OkStatus();
}

absl::Status ModelSnapshotCodec::CheckSummary(std::string_view summary, const std::string& source, uint64_t begin) {
  io::Reader r(summary, source, begin);
  Model::EvictedState state;
  return ReadSummary(r, &state);
}

namespace {
// The checks common to both restarts of an evicted model (format 2 and 3): its head and its
// summary agree, and it did not fail.
absl::Status CheckEvictedHead(io::Reader& r, const ModelHeader& h, uint64_t batches_applied) {
  if (h.failure) return r.Fail("an evicted model cannot have failed");
  if (h.batches != batches_applied) {
    return r.Fail(absl::StrCat("the evicted model's batch count ", batches_applied, " differs from its model object's ",
                               h.batches));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::shared_ptr<Model>> ModelSnapshotCodec::DecodeEvicted(
    std::string_view object, std::string_view summary, const std::string& source, uint64_t begin,
    const ConfigDefaults& defaults, ModelSpill& spill, std::shared_ptr<ModelMetrics> metrics, BatchLog* log) {
  Model::EvictedState state;
  {
    io::Reader r(summary, source, begin + object.size());
    if (absl::Status s = ReadSummary(r, &state); !s.ok()) return s;
  }
  io::Reader r(object, source, begin);
  uint32_t version = 0;
  if (!r.BeginObject(kModelTag, kModelVersion, "model", &version)) return r.status();
  ModelHeader h;
  if (absl::Status s = ReadModelHeader(r, version, defaults, "", &h); !s.ok()) return s;
  if (absl::Status s = CheckEvictedHead(r, h, state.stats.batches_applied); !s.ok()) return s;
  state.applied_sequence = h.applied;
  state.producer_offsets = std::move(h.offsets);
  state.sigma = std::move(h.sigma);
  // Its learner stays undecoded, in a file of its own, until its next batch.
  absl::StatusOr<std::string> path = spill.WriteImage(std::string(object), state.applied_sequence);
  if (!path.ok()) return path.status();
  state.path = *std::move(path);
  // Not make_shared: the constructor of a model restored evicted is private to this codec.
  return std::shared_ptr<Model>(new Model(std::move(h.config), std::move(metrics), log, std::move(state)));
}

absl::StatusOr<std::shared_ptr<Model>> ModelSnapshotCodec::DecodeReferenced(
    std::string_view reference, std::string_view summary, const std::string& source, uint64_t begin,
    const std::string& pins_dir, const ConfigDefaults& defaults, ModelSpill& spill,
    std::shared_ptr<ModelMetrics> metrics, BatchLog* log) {
  Reference ref;
  if (absl::Status s = ReadReference(reference, source, begin, &ref); !s.ok()) return s;
  Model::EvictedState state;
  {
    io::Reader r(summary, source, begin + reference.size());
    if (absl::Status s = ReadSummary(r, &state); !s.ok()) return s;
  }
  // The head as the reference stores it (inside the EREF object of the snapshot file, whose
  // CRC covers it): offsets and config without reading the model's file.
  io::Reader r(ref.head, source, begin);
  ModelHeader h;
  if (absl::Status s = ReadModelHeader(r, ref.model_version, defaults, "", &h); !s.ok()) return s;
  if (r.remaining() != 0) return r.Fail(absl::StrCat(r.remaining(), " unexpected bytes after the model head"));
  if (absl::Status s = CheckEvictedHead(r, h, state.stats.batches_applied); !s.ok()) return s;
  if (h.config.name() != ref.model) {
    return r.Fail(
        absl::StrCat("the reference of model '", ref.model, "' holds the head of model '", h.config.name(), "'"));
  }
  ModelSpill::FileRef file;
  file.pin = absl::StrCat(pins_dir, "/", ref.file);
  file.size = ref.size;
  file.crc = ref.crc;
  file.durable = true;
  file.model_version = ref.model_version;
  file.head = std::move(ref.head);
  absl::StatusOr<std::string> path = spill.Adopt(file);
  if (!path.ok()) {
    return absl::Status(path.status().code(),
                        absl::StrCat(source, ": model '", ref.model, "': ", path.status().message()));
  }
  state.path = *std::move(path);
  state.applied_sequence = h.applied;
  state.producer_offsets = std::move(h.offsets);
  state.sigma = std::move(h.sigma);
  return std::shared_ptr<Model>(new Model(std::move(h.config), std::move(metrics), log, std::move(state)));
}

ModelImage ModelSnapshotCodec::EncodeResident(Model& m) {
  io::Writer w;
  ModelImage image;
  image.name = m.name();
  absl::MutexLock learner_lock(&m.learner_mu_);
  image.applied_sequence = m.applied_sequence();
  const size_t h = w.BeginObject(kModelTag, kModelVersion);
  WriteBody(w, m, /*for_digest=*/false);
  w.EndObject(h);
  image.bytes = w.Release();
  return image;
}

std::string ModelSnapshotCodec::StateBytes(Model& m) {
  io::Writer w;
  w.set_for_digest(true);
  absl::MutexLock learner_lock(&m.learner_mu_);
  WriteBody(w, m, /*for_digest=*/true);
  return w.Release();
}

// Declared in model.h; defined here, next to the encoder whose bytes it hashes, so that the
// digest covers every bit of state a snapshot keeps (and nothing else) by construction.
uint64_t Model::ResidentDigest() {
  const std::string bytes = ModelSnapshotCodec::StateBytes(*this);
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

absl::StatusOr<std::shared_ptr<Model>> ModelSnapshotCodec::Decode(io::Reader& r, const ConfigDefaults& defaults,
                                                                  const std::string& rename,
                                                                  std::shared_ptr<ModelMetrics> metrics,
                                                                  BatchLog* log) {
  uint32_t version = 0;
  if (!r.BeginObject(kModelTag, kModelVersion, "model", &version)) return r.status();
  ModelHeader h;
  if (absl::Status s = ReadModelHeader(r, version, defaults, rename, &h); !s.ok()) return s;
  absl::StatusOr<StreamingLearner> learner = StreamingLearner::Deserialize(
      r, LearnerOptionsFor(h.config), LearnerVersionOf(version), SigmaSelectionFromProto(h.sigma));
  if (!learner.ok()) return learner.status();
  if (!r.EndObject("model")) return r.status();

  // Not make_shared: the constructor around a restored learner is private to this codec.
  std::shared_ptr<Model> model(new Model(h.config, std::move(metrics), log, *std::move(learner)));
  Model& m = *model;
  m.set_applied_sequence(h.applied);
  Model::Stats s;
  {
    absl::MutexLock learner_lock(&m.learner_mu_);
    s = m.LearnerStatsLocked();
  }
  s.batches_applied = h.batches;
  {
    absl::MutexLock stats_lock(&m.stats_mu_);
    m.stats_ = s;
    m.producer_offsets_ = std::move(h.offsets);
    m.published_sigma_ = h.sigma;
  }
  m.metrics().OnBatchApplied(s.samples + s.pending_warmup, s.forced, s.forced_error_sum,
                             {s.pending_warmup, s.dict_x, s.dict_y});
  if (h.failure) {
    absl::MutexLock learner_lock(&m.learner_mu_);
    m.MarkFailedLocked(h.failure->sequence, h.failure->reason);
  }
  return model;
}

// ---------------------------------------------------------------------------------------------
// Files

namespace {

// The checks before the CRC: the magic (`first` is the file's first bytes) and the size.
absl::Status CheckMagicAndSize(std::string_view first, uint64_t size, const std::string& source) {
  if (first.size() < 8 || first.compare(0, 8, kSnapshotMagic) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a cmestream snapshot (the file does not start with \"", kSnapshotMagic, "\")"));
  }
  if (size < kHeaderBytes + kFooterBytes) {
    return absl::DataLossError(
        absl::StrCat(source, ": truncated: ", size, " bytes, a snapshot has at least ", kHeaderBytes + kFooterBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckCrc(uint32_t stored, uint32_t computed, uint64_t body, const std::string& source) {
  if (stored == computed) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(source, ": checksum mismatch over bytes [0, ", body, "): stored CRC32C 0x",
                                          absl::Hex(stored, absl::kZeroPad8), ", computed 0x",
                                          absl::Hex(computed, absl::kZeroPad8), " (the file is corrupt or truncated)"));
}

// The header after the magic (r at offset 8, the CRC checked): kind, version, model count,
// number, time, covered sequence into `f` and `models`.
absl::Status ParseHeader(io::Reader& r, SnapshotFile* f, uint32_t* models) {
  const uint32_t kind = r.U32("snapshot kind");
  if (kind != kSnapTag && kind != kExportTag) {
    return r.Fail(absl::StrCat("unknown snapshot kind ", io::FourccName(kind), " (expected SNAP or EXPT)"));
  }
  const uint32_t version = r.U32("snapshot format version");
  if (version > kFormatVersion) {
    // Not damage (the checksum matched): a newer build wrote it. FailedPrecondition, so that
    // recovery refuses by name instead of setting the file aside and falling back.
    return absl::FailedPreconditionError(absl::StrCat(f->source, ": snapshot format version ", version,
                                                      " was written by a newer cmestreamd (this one reads 1..",
                                                      kFormatVersion, "): run the version that wrote it"));
  }
  if (version < 1) {
    return r.Fail(absl::StrCat("snapshot format version ", version, " is not supported by this build (reads 1..",
                               kFormatVersion, ")"));
  }
  if (kind == kExportTag && version != kExportVersion) {
    return r.Fail(absl::StrCat("export format version ", version, " is not supported by this build (reads 1)"));
  }
  f->format_version = version;
  *models = r.U32("model count");
  if (*models > kMaxModels) return r.Fail(absl::StrCat("model count ", *models, " is above ", kMaxModels));
  f->is_export = kind == kExportTag;
  f->number = r.U64("snapshot number");
  f->created_unix_nanos = r.U64("creation time");
  f->covered_sequence = r.U64("covered sequence");
  return r.status();
}

}  // namespace

absl::StatusOr<SnapshotFile> ParseSnapshotBytes(std::string bytes, const std::string& source) {
  SnapshotFile f;
  f.source = source;
  if (absl::Status s = CheckMagicAndSize(bytes, bytes.size(), source); !s.ok()) return s;
  const size_t body = bytes.size() - kFooterBytes;
  io::Reader footer(std::string_view(bytes).substr(body), source, body);
  const uint32_t stored = crc32c::Unmask(footer.U32("checksum"));
  if (absl::Status s = CheckCrc(stored, crc32c::Value(bytes.data(), body), body, source); !s.ok()) return s;
  io::Reader r(std::string_view(bytes).substr(0, body), source);
  r.U64("magic");
  uint32_t models = 0;
  if (absl::Status s = ParseHeader(r, &f, &models); !s.ok()) return s;
  for (uint32_t i = 0; i < models && r.ok(); ++i) {
    const uint64_t begin = r.offset();
    uint32_t v;
    // Version 3: an evicted model's entry may be a reference to its file (EREF).
    const bool referenced = f.format_version >= kFirstVersionWithReferences && r.remaining() >= 4 &&
                            io::Reader(std::string_view(bytes).substr(begin, 4), source).U32("tag") == kReferenceTag;
    if (referenced) {
      if (!r.BeginObject(kReferenceTag, kReferenceVersion, "evicted model reference", &v)) break;
    } else if (!r.BeginObject(kModelTag, kModelVersion, "model", &v)) {
      break;
    }
    // Skip the body: it is decoded later, model by model.
    const uint64_t end = begin + 16 + (io::Reader(std::string_view(bytes).substr(begin + 8, 8), source).U64("len"));
    r.Skip(end - r.offset(), "model body");
    r.EndObject(referenced ? "evicted model reference" : "model");
    f.model_ranges.push_back(referenced ? std::pair<uint64_t, uint64_t>{0, 0}
                                        : std::pair<uint64_t, uint64_t>{begin, end});
    f.reference_ranges.push_back(referenced ? std::pair<uint64_t, uint64_t>{begin, end}
                                            : std::pair<uint64_t, uint64_t>{0, 0});
    // Version 2: an evicted model's EVCT object follows its MODL object (version 3: or its
    // EREF object, always).
    std::pair<uint64_t, uint64_t> summary{0, 0};
    const bool evct = r.ok() && f.format_version >= kFirstVersionWithEvicted && r.remaining() >= 4 &&
                      io::Reader(std::string_view(bytes).substr(r.offset(), 4), source).U32("tag") == kEvictedTag;
    if (referenced && r.ok() && !evct) {
      (void)r.Fail("an evicted model reference (EREF) must be followed by its evicted model object (EVCT)");
      break;
    }
    if (evct) {
      const uint64_t at = r.offset();
      if (!r.BeginObject(kEvictedTag, kEvictedVersion, "evicted model", &v)) break;
      const uint64_t until = at + 16 + (io::Reader(std::string_view(bytes).substr(at + 8, 8), source).U64("len"));
      r.Skip(until - r.offset(), "evicted model body");
      r.EndObject("evicted model");
      summary = {at, until};
    }
    f.summary_ranges.push_back(summary);
  }
  if (!r.ok()) return r.status();
  if (r.remaining() != 0) return r.Fail(absl::StrCat(r.remaining(), " unexpected bytes after the last model"));
  f.bytes = std::move(bytes);
  return f;
}

absl::StatusOr<SnapshotFile> ReadSnapshotFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("opening snapshot ", path, ": ", ErrnoText()));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = ErrnoText();
      ::close(fd);
      return absl::DataLossError(absl::StrCat("reading snapshot ", path, ": ", why));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return ParseSnapshotBytes(std::move(bytes), path);
}

absl::StatusOr<std::unique_ptr<SnapshotFileReader>> SnapshotFileReader::Open(const std::string& path) {
  std::unique_ptr<SnapshotFileReader> reader(new SnapshotFileReader());
  reader->header_.source = path;
  reader->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (reader->fd_ < 0) return absl::NotFoundError(absl::StrCat("opening snapshot ", path, ": ", ErrnoText()));
  struct stat st {};
  if (::fstat(reader->fd_, &st) != 0)
    return absl::DataLossError(absl::StrCat("reading snapshot ", path, ": ", ErrnoText()));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string first;
  if (absl::Status s = reader->ReadAt(0, static_cast<size_t>(std::min<uint64_t>(size, kHeaderBytes)), &first);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckMagicAndSize(first, size, path); !s.ok()) return s;
  // The CRC over everything before the footer, in one pass of 1 MiB reads.
  reader->body_end_ = size - kFooterBytes;
  uint32_t crc = 0;
  std::string chunk;
  for (uint64_t at = 0; at < reader->body_end_;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(reader->body_end_ - at, 1 << 20));
    if (absl::Status s = reader->ReadAt(at, n, &chunk); !s.ok()) return s;
    crc = crc32c::Extend(crc, chunk.data(), chunk.size());
    at += n;
  }
  std::string footer_bytes;
  if (absl::Status s = reader->ReadAt(reader->body_end_, kFooterBytes, &footer_bytes); !s.ok()) return s;
  io::Reader footer(footer_bytes, path, reader->body_end_);
  const uint32_t stored = crc32c::Unmask(footer.U32("checksum"));
  if (absl::Status s = CheckCrc(stored, crc, reader->body_end_, path); !s.ok()) return s;
  io::Reader r(first, path);
  r.U64("magic");
  if (absl::Status s = ParseHeader(r, &reader->header_, &reader->models_); !s.ok()) return s;
  reader->pos_ = kHeaderBytes;
  return reader;
}

SnapshotFileReader::~SnapshotFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SnapshotFileReader::ReadAt(uint64_t offset, size_t n, std::string* out) const {
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out->data() + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::DataLossError(absl::StrCat("reading snapshot ", header_.source, ": ", ErrnoText()));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("reading snapshot ", header_.source, ": it ended at byte ", offset + done,
                                              " (it changed while being read)"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SnapshotFileReader::Next(std::string* object, uint64_t* begin, std::string* summary,
                                              std::string* reference) {
  if (summary != nullptr) summary->clear();
  if (reference != nullptr) reference->clear();
  if (read_ == models_) {
    if (pos_ != body_end_) {
      io::Reader at(std::string_view(), header_.source, pos_);
      return at.Fail(absl::StrCat(body_end_ - pos_, " unexpected bytes after the last model"));
    }
    return false;
  }
  *begin = pos_;
  // The tag of the object at pos_ (0 if fewer than 4 bytes are left).
  const auto tag_at = [this](uint32_t* tag) -> absl::Status {
    *tag = 0;
    if (body_end_ - pos_ < 4) return absl::OkStatus();
    std::string bytes;
    if (absl::Status s = ReadAt(pos_, 4, &bytes); !s.ok()) return s;
    *tag = io::Reader(bytes, header_.source, pos_).U32("tag");
    return absl::OkStatus();
  };
  uint32_t tag = 0;
  if (header_.format_version >= kFirstVersionWithReferences) {
    if (absl::Status s = tag_at(&tag); !s.ok()) return s;
  }
  const bool referenced = tag == kReferenceTag;
  if (referenced) {
    if (reference == nullptr) {
      io::Reader at(std::string_view(), header_.source, pos_);
      return at.Fail("an evicted model reference (EREF) where this reader takes only model objects");
    }
    object->clear();
    if (absl::Status s = ReadObject(kReferenceTag, kReferenceVersion, "evicted model reference", reference); !s.ok()) {
      return s;
    }
  } else if (absl::Status s = ReadObject(kModelTag, kModelVersion, "model", object); !s.ok()) {
    return s;
  }
  ++read_;
  // Version 2: an evicted model's EVCT object follows its MODL object; version 3: or its EREF
  // object, which always has one.
  if (header_.format_version >= kFirstVersionWithEvicted) {
    if (absl::Status s = tag_at(&tag); !s.ok()) return s;
    if (tag == kEvictedTag) {
      std::string evicted;
      if (absl::Status s = ReadObject(kEvictedTag, kEvictedVersion, "evicted model", &evicted); !s.ok()) return s;
      if (summary != nullptr) *summary = std::move(evicted);
    } else if (referenced) {
      io::Reader at(std::string_view(), header_.source, pos_);
      return at.Fail("an evicted model reference (EREF) must be followed by its evicted model object (EVCT)");
    }
  }
  return true;
}

absl::Status SnapshotFileReader::ReadObject(uint32_t want, uint32_t max_version, const char* name,
                                            std::string* object) {
  std::string frame;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(body_end_ - pos_, 16));
  if (absl::Status s = ReadAt(pos_, n, &frame); !s.ok()) return s;
  io::Reader r(frame, header_.source, pos_);
  const uint32_t tag = r.U32("object tag");
  const uint32_t version = r.U32("object version");
  const uint64_t length = r.U64("object length");
  if (!r.ok()) return r.status();
  io::Reader at(std::string_view(), header_.source, pos_);
  if (tag != want) {
    return at.Fail(
        absl::StrCat("expected ", name, " (tag ", io::FourccName(want), "), found tag ", io::FourccName(tag)));
  }
  if (version < 1 || version > max_version) {
    return at.Fail(absl::StrCat(name, " (", io::FourccName(want), ") version ", version,
                                " is not supported by this build (reads 1..", max_version, ")"));
  }
  if (length > body_end_ - pos_ - 16) {
    return at.Fail(absl::StrCat(name, " needs ", length, " bytes, only ", body_end_ - pos_ - 16, " are left"));
  }
  if (absl::Status s = ReadAt(pos_, static_cast<size_t>(16 + length), object); !s.ok()) return s;
  pos_ += 16 + length;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ExportModel(Model& model) {
  absl::StatusOr<ModelImage> encoded = ModelSnapshotCodec::Image(model);
  if (!encoded.ok()) return encoded.status();
  const ModelImage& image = *encoded;
  std::string out = Header(kExportTag, 1, 0, image.applied_sequence);
  out += image.bytes;
  out += Footer(crc32c::Value(out.data(), out.size()));
  return out;
}

namespace {
// Decodes model `index` of `f` into the registry under `rename` or its stored name.
// `import_image` (a live import): the model comes from another daemon, is checked against the
// limits and logged as an import record carrying these bytes; its applied sequence becomes
// that record's sequence (the exporter's sequence means nothing here). `replay_sequence` (WAL
// replay of such a record): the same without logging. Neither: a restore from a snapshot of
// this daemon, keeping the stored applied sequence.
// The MODL object is `object`, at file offset `begin` of `source`.
absl::StatusOr<std::shared_ptr<Model>> AdoptFrom(std::string_view object, const std::string& source, uint64_t begin,
                                                 const std::string& rename, ModelRegistry& registry,
                                                 const ConfigDefaults& defaults,
                                                 const std::string* import_image = nullptr,
                                                 std::optional<uint64_t> replay_sequence = std::nullopt) {
  absl::StatusOr<v1::ModelConfig> config = PeekConfig(object, source, begin);
  if (!config.ok()) return config.status();
  const std::string name = rename.empty() ? config->name() : rename;
  return registry.Adopt(
      name,
      [&](std::shared_ptr<ModelMetrics> metrics, BatchLog* log) -> absl::StatusOr<std::shared_ptr<Model>> {
        io::Reader r(object, source, begin);
        absl::StatusOr<std::shared_ptr<Model>> m =
            ModelSnapshotCodec::Decode(r, defaults, rename, std::move(metrics), log);
        if (m.ok() && replay_sequence) (*m)->set_applied_sequence(*replay_sequence);
        return m;
      },
      import_image);
}
}  // namespace

namespace {
// A model restored evicted (ModelSnapshotCodec::DecodeEvicted) into the registry.
absl::StatusOr<std::shared_ptr<Model>> AdoptEvicted(std::string_view object, std::string_view summary,
                                                    const std::string& source, uint64_t begin, ModelSpill& spill,
                                                    ModelRegistry& registry, const ConfigDefaults& defaults) {
  absl::StatusOr<v1::ModelConfig> config = PeekConfig(object, source, begin);
  if (!config.ok()) return config.status();
  return registry.Adopt(
      config->name(),
      [&](std::shared_ptr<ModelMetrics> metrics, BatchLog* log) -> absl::StatusOr<std::shared_ptr<Model>> {
        return ModelSnapshotCodec::DecodeEvicted(object, summary, source, begin, defaults, spill, std::move(metrics),
                                                 log);
      });
}
}  // namespace

namespace {
// A model a format 3 snapshot references (EREF `reference` at `begin` of `source`, EVCT
// `summary`), its file pinned in `pins_dir`: restored evicted in place when this daemon evicts
// (`spill`; ModelSnapshotCodec::DecodeReferenced), else decoded from the pinned file, whose
// size, footer and CRC are checked first.
absl::StatusOr<std::shared_ptr<Model>> AdoptReferenced(std::string_view reference, std::string_view summary,
                                                       const std::string& source, uint64_t begin,
                                                       const std::string& pins_dir, ModelSpill* spill,
                                                       ModelRegistry& registry, const ConfigDefaults& defaults) {
  Reference ref;
  if (absl::Status s = ReadReference(reference, source, begin, &ref); !s.ok()) return s;
  if (spill != nullptr) {
    return registry.Adopt(
        ref.model, [&](std::shared_ptr<ModelMetrics> metrics, BatchLog* log) -> absl::StatusOr<std::shared_ptr<Model>> {
          return ModelSnapshotCodec::DecodeReferenced(reference, summary, source, begin, pins_dir, defaults, *spill,
                                                      std::move(metrics), log);
        });
  }
  const std::string pin = absl::StrCat(pins_dir, "/", ref.file);
  if (absl::Status s = CheckPinnedFile(pin, ref.size, ref.crc); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(source, ": model '", ref.model, "': ", s.message()));
  }
  absl::StatusOr<SnapshotFile> f = ReadSnapshotFile(pin);
  if (!f.ok()) return f.status();
  if (!f->is_export || f->model_ranges.size() != 1) {
    return absl::DataLossError(absl::StrCat(pin, " is not the file of one evicted model"));
  }
  const auto [b, e] = f->model_ranges[0];
  const std::string_view object = std::string_view(f->bytes).substr(b, e - b);
  absl::StatusOr<v1::ModelConfig> config = PeekConfig(object, pin, b);
  if (!config.ok()) return config.status();
  if (config->name() != ref.model) {
    return absl::DataLossError(
        absl::StrCat(pin, " holds model '", config->name(), "', its reference in ", source, " says '", ref.model, "'"));
  }
  return AdoptFrom(object, pin, b, "", registry, defaults);
}
}  // namespace

absl::StatusOr<std::shared_ptr<Model>> ImportModel(std::string bytes, const std::string& new_name,
                                                   ModelRegistry& registry, const ConfigDefaults& defaults,
                                                   std::optional<uint64_t> replay_sequence) {
  // The record of a live import is the file exactly as received (validated below first).
  const std::string image = replay_sequence ? std::string() : bytes;
  absl::StatusOr<SnapshotFile> f = ParseSnapshotBytes(std::move(bytes), "import");
  if (!f.ok()) return f.status();
  // A daemon snapshot is not an export, even with one model: its applied sequences belong to
  // the daemon that wrote it. Replay still takes what an earlier build accepted and logged.
  if (!f->is_export && !replay_sequence) {
    return absl::InvalidArgumentError(
        "import: not an export: the file is a daemon snapshot (kind SNAP); import takes the file of `cmestream "
        "model export` (ExportModel, kind EXPT). To restore a snapshot, start the daemon with --recover-from FILE");
  }
  if (f->model_ranges.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("import: the file holds ", f->model_ranges.size(), " models, expected exactly 1 (an export)"));
  }
  // Always under an explicit name, so Decode treats it as an import (an imported fork is
  // a model of its own).
  std::string name = new_name;
  const auto [begin, end] = f->model_ranges[0];
  const std::string_view object = std::string_view(f->bytes).substr(begin, end - begin);
  if (name.empty()) {
    absl::StatusOr<v1::ModelConfig> stored = PeekConfig(object, f->source, begin);
    if (!stored.ok()) return stored.status();
    name = stored->name();
  }
  return AdoptFrom(object, f->source, begin, name, registry, defaults, replay_sequence ? nullptr : &image,
                   replay_sequence);
}

absl::StatusOr<std::unique_ptr<StreamingLearner>> ModelSnapshotCodec::DecodeLearner(
    io::Reader& r, const ConfigDefaults& defaults, const Model& model, std::shared_ptr<ModelMetrics> scratch,
    BatchLog* log) {
  absl::StatusOr<std::shared_ptr<Model>> decoded = Decode(r, defaults, "", std::move(scratch), log);
  if (!decoded.ok()) return decoded.status();
  Model& m = **decoded;
  if (m.name() != model.name() || m.applied_sequence() != model.applied_sequence()) {
    return absl::DataLossError(absl::StrCat("the file holds model '", m.name(), "' at WAL sequence ",
                                            m.applied_sequence(), ", expected '", model.name(), "' at ",
                                            model.applied_sequence()));
  }
  absl::MutexLock learner_lock(&m.learner_mu_);
  return std::move(m.learner_);
}

// ---------------------------------------------------------------------------------------------
// Eviction files

absl::StatusOr<std::unique_ptr<EvictionStore>> EvictionStore::Open(const std::string& dir, ConfigDefaults defaults) {
  if (::mkdir(dir.c_str(), 0775) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("creating ", dir, ": ", ErrnoText()));
  }
  // What a previous run evicted is in its snapshots and log: recovery restored it already.
  int removed = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (::unlink(absl::StrCat(dir, "/", name).c_str()) == 0) ++removed;
    }
    ::closedir(d);
  }
  if (removed > 0) {
    if (absl::Status s = files::FsyncDir(dir); !s.ok()) return s;
  }
  return std::unique_ptr<EvictionStore>(new EvictionStore(dir, defaults));
}

EvictionStore::EvictionStore(std::string dir, ConfigDefaults defaults)
    : dir_(std::move(dir)), defaults_(defaults), scratch_metrics_(std::make_unique<Metrics>()) {}

EvictionStore::~EvictionStore() = default;

std::string EvictionStore::NextPath() {
  return absl::StrCat(dir_, "/", absl::Dec(next_.fetch_add(1) + 1, absl::kZeroPad12), ".modl");
}

std::optional<EvictionStore::FileInfo> EvictionStore::Info(const std::string& path) const {
  absl::MutexLock lock(&mu_);
  const auto it = files_.find(path);
  if (it == files_.end()) return std::nullopt;
  return it->second;
}

namespace {
// Writes an export-format file of one MODL object under its final name (O_EXCL: a new name),
// not fsynced; its size and CRC32C (the footer, unmasked).
absl::Status WriteEvictionFile(const std::string& path, std::string_view image, uint64_t applied_sequence,
                               uint64_t* size, uint32_t* crc) {
  const std::string header = Header(kExportTag, 1, 0, applied_sequence);
  *crc = crc32c::Extend(crc32c::Value(header.data(), header.size()), image.data(), image.size());
  const std::string footer = Footer(*crc);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0664);
  if (fd < 0) return absl::InternalError(absl::StrCat("creating ", path, ": ", ErrnoText()));
  absl::Status status = WriteAll(fd, header, path);
  if (status.ok()) status = WriteAll(fd, image, path);
  if (status.ok()) status = WriteAll(fd, footer, path);
  ::close(fd);
  if (!status.ok()) {
    ::unlink(path.c_str());
    return status;
  }
  *size = header.size() + image.size() + footer.size();
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::string> EvictionStore::Write(Model& model) {
  ModelImage image = ModelSnapshotCodec::EncodeResident(model);
  FileInfo info;
  if (absl::Status s = HeadOf(image.bytes, model.name(), defaults_, &info.model_version, &info.head); !s.ok()) {
    return s;
  }
  // No fsync (ModelSpill::Write): the snapshot that first references the file makes it durable.
  const std::string path = NextPath();
  if (absl::Status s = WriteEvictionFile(path, image.bytes, image.applied_sequence, &info.size, &info.crc); !s.ok()) {
    return s;
  }
  bytes_written_.fetch_add(info.size);
  absl::MutexLock lock(&mu_);
  files_[path] = std::move(info);
  return path;
}

absl::StatusOr<std::unique_ptr<StreamingLearner>> EvictionStore::Read(const std::string& path, const Model& model) {
  const std::optional<FileInfo> info = Info(path);
  absl::StatusOr<std::unique_ptr<StreamingLearner>> learner =
      [&]() -> absl::StatusOr<std::unique_ptr<StreamingLearner>> {
    absl::StatusOr<SnapshotFile> f = ReadSnapshotFile(path);
    if (!f.ok()) return f.status();
    if (!f->is_export || f->model_ranges.size() != 1) {
      return absl::DataLossError(absl::StrCat(path, " is not the file of one evicted model"));
    }
    // The file it wrote or adopted, not another valid one under its name.
    if (info) {
      const uint32_t crc = crc32c::Value(f->bytes.data(), f->bytes.size() - kFooterBytes);
      if (f->bytes.size() != info->size || crc != info->crc) {
        return absl::DataLossError(absl::StrCat(path, " is ", f->bytes.size(), " bytes with CRC32C 0x",
                                                absl::Hex(crc, absl::kZeroPad8), ", expected ", info->size,
                                                " bytes with 0x", absl::Hex(info->crc, absl::kZeroPad8)));
      }
    }
    const auto [begin, end] = f->model_ranges[0];
    io::Reader r(std::string_view(f->bytes).substr(begin, end - begin), path, begin);
    // Each reload's throwaway model gets series of its own: reloads run at once on the ingest
    // threads, and two ModelMetrics of one label share prometheus-cpp's series, which the first to
    // go removes (freed) under the other (heap corruption under a fleet's reloads).
    const std::string label = absl::StrCat("reload-", reloads_.fetch_add(1, std::memory_order_relaxed));
    return ModelSnapshotCodec::DecodeLearner(r, defaults_, model, scratch_metrics_->ForModel(label), &null_log_);
  }();
  if (learner.ok()) return learner;
  // What a restart can do about it (storage/snapshot.h PINS).
  const bool referenced = info && info->durable;
  return absl::Status(
      learner.status().code(),
      absl::StrCat(learner.status().message(),
                   referenced ? "; a kept snapshot references this file as the model's state (snapshots reference "
                                "evicted models' files, they do not copy them), so a restart cannot recover it: "
                                "delete the model, then import an export of it or create it again"
                              : "; no snapshot references this file yet: restart the daemon to recover the model "
                                "from its snapshot and log"));
}

absl::StatusOr<std::string> EvictionStore::ReadImage(const std::string& path) {
  absl::StatusOr<SnapshotFile> f = ReadSnapshotFile(path);
  if (!f.ok()) return f.status();
  if (!f->is_export || f->model_ranges.size() != 1) {
    return absl::DataLossError(absl::StrCat(path, " is not the file of one evicted model"));
  }
  const auto [begin, end] = f->model_ranges[0];
  return f->bytes.substr(begin, end - begin);
}

absl::StatusOr<std::string> EvictionStore::WriteImage(const std::string& image, uint64_t applied_sequence) {
  FileInfo info;
  if (absl::Status s = HeadOf(image, "snapshot", defaults_, &info.model_version, &info.head); !s.ok()) return s;
  const std::string path = NextPath();
  if (absl::Status s = WriteEvictionFile(path, image, applied_sequence, &info.size, &info.crc); !s.ok()) return s;
  bytes_written_.fetch_add(info.size);
  absl::MutexLock lock(&mu_);
  files_[path] = std::move(info);
  return path;
}

absl::StatusOr<ModelSpill::FileRef> EvictionStore::Pin(const std::string& path, const std::string& dir) {
  FileRef ref;
  ref.source = path;
  ref.pin = absl::StrCat(dir, "/", files::BaseName(path));
  std::optional<FileInfo> info = Info(path);
  if (!info) {
    // Not a file it wrote (none normally): what it records, from the file (read once, whole).
    absl::StatusOr<SnapshotFile> f = ReadSnapshotFile(path);
    if (!f.ok()) return f.status();
    if (!f->is_export || f->model_ranges.size() != 1) {
      return absl::DataLossError(absl::StrCat(path, " is not the file of one evicted model"));
    }
    FileInfo read;
    const auto [begin, end] = f->model_ranges[0];
    if (absl::Status s = HeadOf(std::string_view(f->bytes).substr(begin, end - begin), path, defaults_,
                                &read.model_version, &read.head);
        !s.ok()) {
      return s;
    }
    read.size = f->bytes.size();
    read.crc = crc32c::Value(f->bytes.data(), f->bytes.size() - kFooterBytes);
    info = std::move(read);
    absl::MutexLock lock(&mu_);
    files_[path] = *info;
  }
  if (::link(path.c_str(), ref.pin.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot pin ", path, " as ", ref.pin, ": ", ErrnoText()));
  }
  ref.size = info->size;
  ref.crc = info->crc;
  ref.durable = info->durable;
  ref.model_version = info->model_version;
  ref.head = std::move(info->head);
  return ref;
}

absl::Status EvictionStore::MakeDurable(const FileRef& ref) {
  const int fd = ::open(ref.pin.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("opening ", ref.pin, " to fsync it: ", ErrnoText()));
  const bool synced = ::fsync(fd) == 0;
  const std::string why = synced ? "" : ErrnoText();
  ::close(fd);
  if (!synced) return absl::InternalError(absl::StrCat("fsync of ", ref.pin, ": ", why));
  files_synced_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  if (const auto it = files_.find(ref.source); it != files_.end()) it->second.durable = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> EvictionStore::Adopt(const FileRef& ref) {
  if (absl::Status s = CheckPinnedFile(ref.pin, ref.size, ref.crc); !s.ok()) return s;
  const std::string path = NextPath();
  if (::link(ref.pin.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot link ", ref.pin, " as ", path, ": ", ErrnoText()));
  }
  FileInfo info;
  info.size = ref.size;
  info.crc = ref.crc;
  info.durable = true;  // the snapshot that references it made it so
  info.model_version = ref.model_version;
  info.head = ref.head;
  absl::MutexLock lock(&mu_);
  files_[path] = std::move(info);
  return path;
}

void EvictionStore::Remove(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    std::cerr << "cmestreamd: warning: cannot remove " << path << ": " << ErrnoText() << "\n";
  }
  absl::MutexLock lock(&mu_);
  files_.erase(path);
}

// ---------------------------------------------------------------------------------------------
// Manager

absl::Status SnapshotOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("snapshot directory is empty");
  if (!(interval_seconds >= 0) || interval_seconds > 1e7) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --snapshot-interval is ", interval_seconds, ", expected seconds in [0, 1e7] (0 = off)"));
  }
  if (keep < 1) return absl::InvalidArgumentError("snapshots kept must be >= 1");
  return absl::OkStatus();
}

SnapshotManager::SnapshotManager(SnapshotOptions options, ModelRegistry& registry, ConfigDefaults defaults,
                                 const BatchLog* log, Manifest* manifest)
    : options_(std::move(options)),
      registry_(registry),
      defaults_(defaults),
      log_(log),
      manifest_(manifest),
      verify_metrics_(std::make_unique<Metrics>()) {
  ::mkdir(options_.dir.c_str(), 0775);
  const auto existing = ListSnapshots(options_.dir);
  if (!existing.empty()) next_number_ = existing.back().first + 1;
  // Never reuse the number of a snapshot set aside as unusable.
  for (const auto& [n, path] : ListSnapshots(options_.dir + "/unusable")) next_number_ = std::max(next_number_, n + 1);
  // A pins directory without its snapshot: a crash before the snapshot's rename, or between
  // the removal of a snapshot and of its pins. Nothing refers to its pins.
  std::vector<std::string> stray;
  if (DIR* d = ::opendir(options_.dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      uint64_t n = 0;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".pins") == 0 &&
          ParseSnapshotName(name.substr(0, name.size() - 5) + ".snap", &n) &&
          !files::Exists(absl::StrCat(options_.dir, "/", SnapshotName(n)))) {
        stray.push_back(absl::StrCat(options_.dir, "/", name));
      }
    }
    ::closedir(d);
  }
  for (const std::string& dir : stray) RemovePins(dir);
}

SnapshotManager::~SnapshotManager() { Stop(); }

std::vector<std::string> SnapshotManager::List() const {
  std::vector<std::string> out;
  for (auto& [n, path] : ListSnapshots(options_.dir)) out.push_back(path);
  return out;
}

absl::StatusOr<LoadReport> SnapshotManager::Load(const std::vector<ManifestState::Snapshot>& listed,
                                                 const std::string& recover_from) {
  LoadReport report;
  for (const auto& l : listed) report.newest_listed_covered = std::max(report.newest_listed_covered, l.covered);
  // Candidates, newest first: the files present and the ones the manifest lists (a listed file
  // that is missing is reported; a file newer than the manifest, written just before a crash
  // cut the manifest update short, is as good as any).
  std::vector<std::pair<uint64_t, std::string>> candidates;
  if (!recover_from.empty()) {
    candidates.emplace_back(0, recover_from);
  } else {
    candidates = ListSnapshots(options_.dir);
    for (const auto& l : listed) {
      uint64_t n = 0;
      const std::string path = absl::StrCat(options_.dir, "/", l.name);
      if (ParseSnapshotName(l.name, &n) &&
          std::find(candidates.begin(), candidates.end(), std::make_pair(n, path)) == candidates.end()) {
        candidates.emplace_back(n, path);
      }
    }
    std::sort(candidates.begin(), candidates.end());
    std::reverse(candidates.begin(), candidates.end());
  }
  for (const auto& [number, path] : candidates) {
    // Model by model: memory is the models restored plus one model's bytes, not the file.
    absl::StatusOr<std::unique_ptr<SnapshotFileReader>> f = SnapshotFileReader::Open(path);
    absl::Status status = f.status();
    std::vector<std::shared_ptr<Model>> adopted;
    if (f.ok()) {
      std::string object, summary, reference;
      uint64_t begin = 0;
      ModelSpill* spill = registry_.spill();
      const std::string pins_dir = PinsDirOf(path);
      while (status.ok()) {
        absl::StatusOr<bool> more = (*f)->Next(&object, &begin, &summary, &reference);
        if (!more.ok()) status = more.status();
        if (!status.ok() || !*more) break;
        // A model evicted at the snapshot comes back evicted (RESTART), when this daemon evicts:
        // in place, its pinned file linked back (format 3), or from its copied bytes (format 2).
        absl::StatusOr<std::shared_ptr<Model>> m =
            !reference.empty() ? AdoptReferenced(reference, summary, path, begin, pins_dir, spill, registry_, defaults_)
            : !summary.empty() && spill != nullptr
                ? AdoptEvicted(object, summary, path, begin, *spill, registry_, defaults_)
                : AdoptFrom(object, path, begin, "", registry_, defaults_);
        if (m.ok()) adopted.push_back(*m);
        else status = m.status();
      }
    }
    if (!status.ok()) {
      for (const auto& m : adopted) (void)registry_.Delete(m->name(), /*replay=*/true);  // all or nothing
      if (status.code() == absl::StatusCode::kFailedPrecondition) {
        // Written by a newer build: falling back would hide it and the next snapshot would
        // supersede it; the operator must run the newer version (service/README.md "Fault table").
        return absl::FailedPreconditionError(absl::StrCat("refusing to start: ", status.message(),
                                                          "; the file is kept as it is and nothing was changed"));
      }
      const bool missing = status.code() == absl::StatusCode::kNotFound;
      std::fprintf(stderr, "cmestreamd: snapshot %s is %s: %s; trying the previous one\n", path.c_str(),
                   missing ? "missing" : "unusable", std::string(status.message()).c_str());
      report.skipped.push_back(absl::StrCat(path, ": ", status.message()));
      if (!missing) report.unusable.push_back(path);
      if (!recover_from.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--recover-from ", recover_from, " is not a usable snapshot: ", status.message()));
      }
      continue;
    }
    report.path = path;
    report.number = (*f)->header().number;
    report.models = static_cast<int>(adopted.size());
    report.covered_sequence = (*f)->header().covered_sequence;
    return report;
  }
  return report;
}

absl::Status SnapshotManager::SetAside(const std::vector<std::string>& paths) {
  if (paths.empty()) return absl::OkStatus();
  const std::string dir = options_.dir + "/unusable";
  ::mkdir(dir.c_str(), 0775);
  for (const std::string& path : paths) {
    const std::string to = absl::StrCat(dir, "/", files::BaseName(path));
    if (::rename(path.c_str(), to.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot move unusable snapshot ", path, " to ", to, ": ", ErrnoText()));
    }
    // Its pins go with it (a snapshot without them could not be inspected whole).
    if (files::Exists(PinsDirOf(path)) && ::rename(PinsDirOf(path).c_str(), PinsDirOf(to).c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot move the pins of unusable snapshot ", path, " to ", PinsDirOf(to), ": ", ErrnoText()));
    }
    std::fprintf(stderr, "cmestreamd: kept unusable snapshot %s for inspection as %s\n", path.c_str(), to.c_str());
  }
  if (absl::Status s = files::FsyncDir(dir); !s.ok()) return s;
  return files::FsyncDir(options_.dir);
}

std::vector<ManifestState::Snapshot> SnapshotManager::Kept() const {
  std::vector<ManifestState::Snapshot> out;
  for (const auto& [n, path] : ListSnapshots(options_.dir)) {
    absl::StatusOr<std::unique_ptr<SnapshotFileReader>> f = SnapshotFileReader::Open(path);
    if (f.ok()) out.push_back({files::BaseName(path), (*f)->header().covered_sequence});
  }
  return out;
}

absl::Status SnapshotManager::VerifyFile(const std::string& path, const std::string& pins_dir) const {
  // Model by model (SnapshotFileReader): memory is one model, however large the file.
  absl::StatusOr<std::unique_ptr<SnapshotFileReader>> f = SnapshotFileReader::Open(path);
  if (!f.ok()) return absl::InternalError(absl::StrCat("snapshot verification: ", f.status().message()));
  NullBatchLog null_log;
  std::string object;
  uint64_t begin = 0;
  std::string summary, reference;
  for (size_t i = 0;; ++i) {
    absl::StatusOr<bool> more = (*f)->Next(&object, &begin, &summary, &reference);
    if (!more.ok()) return absl::InternalError(absl::StrCat("snapshot verification: ", more.status().message()));
    if (!*more) break;
    if (!reference.empty()) {
      // A referenced model: its reference, head and summary parse, and its pin is the file the
      // reference describes (size and footer; its bytes are not read: the eviction wrote them
      // from the model's encoding, and its reload checks them whole).
      Reference ref;
      absl::Status s = ReadReference(reference, path, begin, &ref);
      if (s.ok()) s = ModelSnapshotCodec::CheckSummary(summary, path, begin + reference.size());
      if (s.ok()) {
        io::Reader r(ref.head, path, begin);
        ModelHeader h;
        s = ReadModelHeader(r, ref.model_version, defaults_, "", &h);
      }
      if (s.ok()) s = CheckPinnedFile(absl::StrCat(pins_dir, "/", ref.file), ref.size, ref.crc);
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat("snapshot verification: model ", i, " (a reference) does not check: ",
                                                s.message(), "; the snapshot was not installed"));
      }
      continue;
    }
    if (!summary.empty()) {
      if (absl::Status s = ModelSnapshotCodec::CheckSummary(summary, path, begin + object.size()); !s.ok()) {
        return absl::InternalError(absl::StrCat("snapshot verification: model ", i, "'s evicted state does not parse: ",
                                                s.message(), "; the snapshot was not installed"));
      }
    }
    const uint64_t end = begin + object.size();
    io::Reader r(object, path, begin);
    absl::StatusOr<std::shared_ptr<Model>> m =
        ModelSnapshotCodec::Decode(r, defaults_, "", verify_metrics_->ForModel("verify"), &null_log);
    if (!m.ok()) {
      return absl::InternalError(absl::StrCat("snapshot verification: model ", i, " does not decode: ",
                                              m.status().message(), "; the snapshot was not installed"));
    }
    // Decoding then encoding again must give the same bytes: the decoder restores every bit
    // the encoder wrote, so the restored model is the model that was saved.
    const std::string again = ModelSnapshotCodec::Encode(**m).bytes;
    if (again != object) {
      size_t at = 0;
      while (at < again.size() && begin + at < end && again[at] == object[at]) ++at;
      return absl::InternalError(absl::StrCat("snapshot verification: model '", (*m)->name(),
                                              "' does not round-trip (first difference at byte ", begin + at,
                                              "); the snapshot was not installed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SnapshotResult> SnapshotManager::TakeNow() {
  absl::MutexLock take_lock(&take_mu_);
  const auto start = std::chrono::steady_clock::now();
  SnapshotResult result;
  result.number = next_number_;
  // The cut: the models and the log's last sequence L read together under the registry lock,
  // once no creation, import or deletion is in progress (ListAtCut waits for them), so every
  // such record <= L is reflected in the models listed. A batch record is written, made durable and then applied (group
  // commit, no model lock across the fdatasync), so a batch <= L may still be in flight: WaitAppliedThrough(L) waits
  // for it (at most one per model) before Encode takes the model's lock, so Encode sees every record <= L of the model
  // that was or will be applied; a model created, imported or deleted after the cut has its record above L. Taking
  // min(applied) instead would let one idle model pin every WAL segment since its last batch.
  uint64_t covered = 0;
  const std::vector<std::shared_ptr<Model>> models = registry_.ListAtCut(&covered);
  if (log_ == nullptr) covered = 0;
  // Each model is copied under its own lock; the file is written after, off every lock. The
  // covered sequence and the count go in the header, so every part is taken before the write
  // (into the spool below; an evicted model is a pin of its file in the snapshot's pins
  // directory, written as a reference: SnapshotPart).
  const std::string name = SnapshotName(result.number);
  const std::string pins_dir = PinsDirOf(absl::StrCat(options_.dir, "/", name));
  RemovePins(pins_dir);  // a leftover of a failed attempt at this number (none normally)
  if (::mkdir(pins_dir.c_str(), 0775) != 0) {
    absl::Status s = absl::InternalError(absl::StrCat("creating ", pins_dir, ": ", ErrnoText()));
    if (observer_) observer_(s);
    return s;
  }
  std::vector<SnapshotPart> images;
  // On failure: the parts remove their pins, then the directory goes.
  const auto fail = [&](const absl::Status& s) {
    images.clear();
    RemovePins(pins_dir);
    if (observer_) observer_(s);
    return s;
  };
  // Each part's bytes go to an unnamed spool file as soon as it is taken: the header's count is
  // known only once the forks are listed, after every part, and holding every resident model's
  // bytes until then was the snapshot's peak (7 GiB for ~300 resident 8-channel models at a
  // shutdown, over a 5 GiB budget). Now one model's bytes are in memory at a time, and the spool
  // (the resident models' serialized size) is on disk until the file is written.
  absl::StatusOr<SpoolFile> spool = SpoolFile::Open(options_.dir);
  if (!spool.ok()) return fail(spool.status());
  std::vector<SpoolFile::Span> spans;
  const auto take = [&](Model& m) -> absl::Status {
    absl::StatusOr<SnapshotPart> image = ModelSnapshotCodec::Part(m, pins_dir);
    if (!image.ok()) return image.status();
    absl::StatusOr<SpoolFile::Span> span = spool->Append(image->TakeBytes());
    if (!span.ok()) return span.status();
    spans.push_back(*span);
    images.push_back(*std::move(image));  // for its pin, if it has one
    return absl::OkStatus();
  };
  images.reserve(models.size());
  std::set<std::string> imaged;
  for (const auto& m : models) {
    m->WaitAppliedThrough(covered);
    if (absl::Status s = take(*m); !s.ok()) return fail(s);
    imaged.insert(m->name());
  }
  // Forks have no records of their own: a batch <= L applied after the cut may have started one
  // (Model::Ingest feeds the forks before the batch stops pending). Every fork of a listed model
  // is kept, each imaged after its parent (its share of a record is applied after the parent's),
  // so replay skips in the fork what the image holds (ApplyFork) and starts none twice.
  for (const auto& m : registry_.List()) {
    if (IsFork(m->config()) && imaged.count(m->config().fork_of()) > 0 && imaged.insert(m->name()).second) {
      if (absl::Status s = take(*m); !s.ok()) return fail(s);
    }
  }
  // DURABILITY (storage/snapshot.h PINS): every file this snapshot references is durable, and
  // so are the pins' names, before the snapshot's own file can be renamed into place.
  {
    const auto sync_start = std::chrono::steady_clock::now();
    std::vector<SnapshotPart*> todo;
    for (SnapshotPart& part : images) {
      if (!part.pinned()) continue;
      ++result.referenced;
      if (!part.ref().durable) todo.push_back(&part);
    }
    // Each fsync of a newly pinned file commits the file system's journal (the link changed its
    // inode) and costs ~3 ms here whatever its size; fsyncs issued at once share commits, so a
    // few short-lived threads sync the files (each part is one thread's; the store's record is
    // under its own lock).
    std::atomic<size_t> at{0};
    std::atomic<int> synced{0};
    absl::Mutex error_mu;
    absl::Status error;
    const auto sync_some = [&] {
      for (size_t i; (i = at.fetch_add(1)) < todo.size();) {
        absl::StatusOr<bool> done = todo[i]->MakeDurable();
        if (done.ok()) {
          synced.fetch_add(*done ? 1 : 0);
          continue;
        }
        absl::MutexLock lock(&error_mu);
        if (error.ok()) error = done.status();
      }
    };
    std::vector<std::thread> threads;
    for (size_t t = 1; t < std::min<size_t>(kSyncThreads, todo.size()); ++t) threads.emplace_back(sync_some);
    sync_some();
    for (std::thread& t : threads) t.join();
    result.files_synced = synced.load();
    if (!error.ok()) return fail(error);
    absl::Status s = files::FsyncDir(pins_dir);
    if (s.ok()) s = files::FsyncDir(options_.dir);
    if (!s.ok()) return fail(s);
    result.sync_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
  }
  size_t next = 0;
  bool header_done = false;
  absl::StatusOr<uint64_t> bytes = WriteAtomically(
      options_.dir, name,
      [&](std::string* chunk) -> absl::StatusOr<bool> {
        if (!header_done) {
          header_done = true;
          *chunk = Header(kSnapTag, static_cast<uint32_t>(images.size()), result.number, covered);
          return true;
        }
        if (next >= spans.size()) return false;
        // A resident model's bytes, or an evicted one's reference, back from the spool.
        absl::StatusOr<std::string> part = spool->Read(spans[next++]);
        if (!part.ok()) return part.status();
        *chunk = *std::move(part);
        return true;
      },
      [&](const std::string& tmp) { return VerifyFile(tmp, pins_dir); });
  if (!bytes.ok()) return fail(bytes.status());
  // Installed: its pins are its own now (retention removes them with it).
  for (SnapshotPart& part : images) part.Keep();
  if (result.referenced == 0) ::rmdir(pins_dir.c_str());
  result.models = static_cast<int>(images.size());
  images.clear();
  ++next_number_;
  result.path = absl::StrCat(options_.dir, "/", SnapshotName(result.number));
  result.bytes = *bytes;
  result.covered_sequence = covered;
  // Keep the newest `keep`. The manifest stops listing the old ones before they are deleted,
  // then the WAL may drop what the oldest kept one covers (unusable snapshots were moved to
  // snapshots/unusable at start and are never pruned).
  auto files = ListSnapshots(options_.dir);
  std::vector<std::pair<uint64_t, std::string>> doomed;
  while (static_cast<int>(files.size()) > options_.keep) {
    doomed.push_back(files.front());
    files.erase(files.begin());
  }
  uint64_t oldest_covered = covered;
  std::vector<ManifestState::Snapshot> kept;
  for (const auto& [n, path] : files) {
    absl::StatusOr<std::unique_ptr<SnapshotFileReader>> f =
        n == result.number ? absl::NotFoundError("") : SnapshotFileReader::Open(path);
    const uint64_t c = n == result.number ? covered : (f.ok() ? (*f)->header().covered_sequence : 0);
    if (n != result.number && !f.ok()) continue;  // not usable: never listed, never counted
    kept.push_back({files::BaseName(path), c});
    oldest_covered = std::min(oldest_covered, c);
  }
  absl::Status listed = manifest_ ? manifest_->SetSnapshots(kept) : absl::OkStatus();
  if (listed.ok()) {
    for (const auto& [n, path] : doomed) {
      ::unlink(path.c_str());
      RemovePins(PinsDirOf(path));
    }
    if (covered_) covered_(oldest_covered);
  } else {
    std::fprintf(stderr, "cmestreamd: warning: cannot update the manifest after snapshot %s: %s; nothing pruned\n",
                 result.path.c_str(), std::string(listed.message()).c_str());
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Each resident model's bytes were held in turn: give the pages back, or the heap keeps the
  // largest model's encoding resident.
  ::malloc_trim(0);
  if (observer_) observer_(result);
  return result;
}

void SnapshotManager::Start() {
  if (options_.interval_seconds <= 0 || periodic_) return;
  periodic_ = std::make_unique<PeriodicThread>(
      absl::Seconds(options_.interval_seconds),
      [this] {
        absl::StatusOr<SnapshotResult> r = TakeNow();
        if (!r.ok())
          std::fprintf(stderr, "cmestreamd: periodic snapshot failed: %s\n", std::string(r.status().message()).c_str());
      },
      "cme-snapshot");
  periodic_->Start();
}

void SnapshotManager::Stop() {
  if (periodic_) periodic_->Stop();
}

}  // namespace cmestream::service
