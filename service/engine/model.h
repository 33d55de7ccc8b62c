// One model of the registry: its configuration, its learner (core/stream/streaming_learner.h:
// the per-sample math), its producers' applied offsets, the WAL port, its counters and its
// latest view.
//
// Concurrency (why these locks):
//   ingest_mu_   the per-model sequencer: held by Ingest from de-duplication to the end of the
//                application, so one batch of the model is in flight and batches are applied
//                in the order of their WAL records. Nothing else takes it.
//   log_mu_      held while a batch is de-duplicated and its record written (not while it
//                waits for durability); guards deleted_, so no record follows a deletion.
//   learner_mu_  serializes the application of a batch (SGD is sequential) and the brief
//                snapshot taken by a refresh or a snapshot. Never held across I/O.
//   stats_mu_    guards the small published copy of the counters and the producer offsets,
//                updated at the end of each batch: GetModel/GetProducer/the scheduler read it
//                without waiting for a batch in progress.
//   view_mu_     guards the pointer to the latest immutable view (copying a shared_ptr is not
//                atomic); queries copy the pointer and never wait for ingestion or refresh.
// Different models share nothing, so they learn in parallel.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cmestream/v1/cmestream.pb.h"
#include "core/spectral/prequential_score.h"
#include "core/stream/streaming_learner.h"
#include "service/engine/batch.h"
#include "service/engine/batch_log.h"
#include "service/engine/memory_budget.h"
#include "service/engine/model_config.h"
#include "service/engine/model_view.h"
#include "service/observability/metrics.h"

namespace cmestream::service {

class Model;

// What one applied batch of a model with on_change "fork" brings its forks (ModelRegistry
// implements the sink): the pairs before the batch's first new alarm continue the current fork,
// each new alarm starts the next fork at its pair. Rows index the batch as applied (StreamBatch:
// a trajectory's pair i is rows i, i + 1; with delays, the row where pair i's first window ends).
struct ForkPlan {
  int64_t current = 0;        // the parent's alarms before the batch: fork `current` continues (0: none yet)
  int64_t current_index = 0;  // the index of that alarm (ForkConfig's fork_index)
  struct Start {
    int64_t row = 0;    // the alarming pair's first row in the batch
    int64_t index = 0;  // its alarm index (AlarmRecord::index)
  };
  std::vector<Start> starts;  // alarms raised by the batch, oldest first: forks current + 1, ...
};
// Pairs [begin, end) of `b` as a batch of their own (a trajectory's rows begin..end), with b's
// episode key; only a part that starts at b's first pair keeps b's gap.
StreamBatch PairsOf(const StreamBatch& b, int64_t begin, int64_t end);

class ForkSink {
 public:
  virtual ~ForkSink() = default;
  // Called by the parent's Ingest after the batch was applied to the parent, under its
  // sequencer (so a parent's batches reach its forks in WAL order), with the batch's WAL
  // `sequence` (0 without a WAL), also on replay.
  virtual void Forward(const Model& parent, const ForkPlan& plan, const StreamBatch& applied, uint64_t sequence) = 0;
};

// Where an evicted model's learner goes (EVICTION below; EvictionStore in service/storage/snapshot.h keeps it
// in one file per eviction under DATA_DIR/evicted, the export format).
class ModelSpill {
 public:
  virtual ~ModelSpill() = default;
  // Writes the image of `model` (its learner resident; called under its sequencer and eviction
  // lock, so nothing changes it meanwhile) to a new file and returns the file's path. Not
  // fsynced: until a daemon snapshot references the file (and makes it durable, MakeDurable),
  // the model's state is in the previous snapshot and the log.
  virtual absl::StatusOr<std::string> Write(Model& model) = 0;
  // Reads the file back (checksum verified, and its size and CRC32C those recorded for it) and
  // decodes the learner it holds for `model`. An error says whether a restart recovers the
  // model (a file no snapshot references yet: the previous snapshot and the log hold it) or not
  // (a file a kept snapshot references is the only copy of the model's state).
  virtual absl::StatusOr<std::unique_ptr<StreamingLearner>> Read(const std::string& path, const Model& model) = 0;
  // The file's MODL object (checksum verified): what an export copies.
  virtual absl::StatusOr<std::string> ReadImage(const std::string& path) = 0;
  // What a daemon snapshot (format 3) records of an evicted model's file instead of its bytes.
  struct FileRef {
    std::string source;          // the file under DATA_DIR/evicted that was pinned
    std::string pin;             // the pin (a hard link to it) in the snapshot's pins directory
    uint64_t size = 0;           // bytes of the file
    uint32_t crc = 0;            // CRC32C of every byte before its footer (the footer, unmasked)
    bool durable = false;        // fsynced already (by an earlier snapshot, or adopted at start)
    uint32_t model_version = 0;  // the MODL object's version
    std::string head;            // the MODL body before the learner's state (config, offsets, ...)
  };
  // A second name for the file (a hard link in `dir`, a snapshot's pins directory), so that the
  // snapshot keeps its bytes after the model was loaded back (which removes `path`) for as long
  // as the snapshot is kept. Called under the model's eviction lock; O(1) for a file this spill
  // wrote or adopted (what it records of it), no data copied.
  virtual absl::StatusOr<FileRef> Pin(const std::string& path, const std::string& dir) = 0;
  // fsync of the pinned file unless it is durable already (then it is marked durable). The
  // caller fsyncs the pins directory.
  virtual absl::Status MakeDurable(const FileRef& ref) = 0;
  // RESTART from a format 3 snapshot: a new name under DATA_DIR/evicted for the pinned file
  // `ref.pin` (a hard link: no byte copied), after checking its size and footer against `ref`;
  // its path. Durable (the snapshot that references it made it so).
  virtual absl::StatusOr<std::string> Adopt(const FileRef& ref) = 0;
  virtual void Remove(const std::string& path) = 0;
  // Writes the MODL object `image` (a model evicted when a format 2 daemon snapshot was taken,
  // restored evicted from it at start) to a new file, as Write would, and returns its path.
  virtual absl::StatusOr<std::string> WriteImage(const std::string& image, uint64_t applied_sequence) = 0;
};

class Model {
 public:
  // requires: `config` came from NormalizeModelConfig; `log` outlives the model.
  Model(const v1::ModelConfig& config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log);
  // Removes the file of an evicted model (once nobody, not even a snapshot in progress, holds it).
  ~Model();

  const std::string& name() const { return config_.name(); }
  const v1::ModelConfig& config() const { return config_; }
  int dim() const { return static_cast<int>(config_.dim()); }  // 0 for discrete models; raw rows
  // Values per learned state (atoms, windows): dim x delays; 1 for discrete models.
  int state_dim() const { return static_cast<int>(StateDim(config_)); }
  bool discrete() const { return config_.num_states() > 0; }
  ModelMetrics& metrics() { return *metrics_; }

  struct IngestResult {
    uint64_t received = 0;
    uint64_t applied = 0;
    uint64_t producer_offset = 0;
    uint64_t model_samples = 0;  // accepted pairs: learner samples + pending warm-up
    ObserveSummary learned;      // what the applied pairs did (empty for duplicates)
    uint64_t alarms_raised = 0;  // change alarms the applied pairs raised
    // With PairBatch::anomaly_scores on a model with alarms: the applied pairs' anomaly scores
    // (AlarmMonitor::set_score_sink), the first of stream index anomaly_scores_index.
    std::vector<double> anomaly_scores;
    uint64_t anomaly_scores_index = 0;
  };
  // Applies a validated batch exactly once per producer (see IngestBatch in the proto): pairs
  // before the producer's applied offset are skipped; an offset beyond it is a gap and
  // answers FAILED_PRECONDITION with nothing applied. Empty producer_id: no de-duplication.
  // The pairs applied go to the learner (StreamingLearner::Observe: the sigma warm-up, every
  // estimator pair by pair, trajectories state by state) with the episode key (producer_id,
  // episode_id): a trajectory batch continues the current episode iff the previous trajectory
  // batch applied to this model came from the same producer_id with the same episode_id and
  // ended with this batch's first applied state (the client repeats it).
  // Cost O(n (m^2 + N^2)), no allocation per pair except a first-seen count entry.
  // Before anything is applied the batch (restricted to the pairs applied) is written to the
  // BatchLog (under log_mu_), then made durable (BatchLog::WaitDurable, no model lock held:
  // the WAL's group commit), then applied under learner_mu_; if the write or the durability
  // fails, nothing is applied and the log's status is returned.
  // Replay (WAL recovery): with `replay_sequence` set, the batch is not logged again and the
  // model's applied_sequence() becomes *replay_sequence; the computation is otherwise the same.
  // NotFound once the model was deleted (MarkDeleted).
  absl::StatusOr<IngestResult> Ingest(const PairBatch& batch, const std::string& producer_id, uint64_t offset,
                                      uint64_t batch_index, const std::string& episode_id = "",
                                      std::optional<uint64_t> replay_sequence = std::nullopt)
      ABSL_LOCKS_EXCLUDED(ingest_mu_, log_mu_, learner_mu_, stats_mu_);

  // A fork's share of its parent's batch (ForkSink::Forward; ModelConfig.fork_of): learned like
  // Ingest's pairs, under this model's locks, with the parent's WAL `sequence` as this model's
  // applied sequence. Skipped when the fork holds that record already (a snapshot of the fork
  // taken after the parent's; replay after it) or was deleted.
  void ApplyFork(const StreamBatch& part, uint64_t sequence) ABSL_LOCKS_EXCLUDED(ingest_mu_, log_mu_, learner_mu_);
  // Forks (ModelRegistry): the sink this model's alarms start forks through (on_change "fork").
  // requires: called before the model is shared between threads.
  void SetForkSink(ForkSink* sink) { fork_sink_ = sink; }

  // Ends the sigma warm-up early, on the pairs buffered so far (StreamingLearner::EndWarmup:
  // >= 50 of them; the scaler and sigma are chosen from them). Called by an explicit Refresh,
  // never by the scheduler's timer: it changes the learner, so it is logged first (a WAL batch
  // record with end_warmup and no pairs) and replay ends the warm-up at the same pair.
  // FailedPrecondition (nothing logged or changed) when the learner is ready or too few pairs
  // are buffered; the log's status when the record cannot be written; NotFound once deleted.
  // With `replay_sequence` the record is not logged again.
  absl::Status EndWarmup(std::optional<uint64_t> replay_sequence = std::nullopt)
      ABSL_LOCKS_EXCLUDED(ingest_mu_, log_mu_, learner_mu_, stats_mu_);

  // Sequence number of the last WAL record applied to this model (its creation record at
  // first; 0 without a WAL). Stable while the learner lock is held: Snapshot() reports it.
  uint64_t applied_sequence() const { return applied_sequence_.load(); }
  void set_applied_sequence(uint64_t s) { applied_sequence_.store(s); }

  // Deletion: under the learner lock (so no batch of this model is logged after it), runs
  // `log_deletion`; if that succeeds the model refuses every later Ingest with NotFound.
  // Never waits for a batch's fdatasync (takes log_mu_ only); a batch written before the
  // deletion record may still be applied after it, as replay does.
  absl::Status MarkDeleted(const std::function<absl::Status()>& log_deletion) ABSL_LOCKS_EXCLUDED(log_mu_);

  // Returns once no batch of this model with a WAL sequence <= `sequence` is between its
  // write and its application (or failure). The snapshot writer calls it after reading its
  // cut S = last_sequence() and before taking the model's image, so the image covers every
  // record of the model <= S that will ever be applied. Must not be called with learner_mu_.
  void WaitAppliedThrough(uint64_t sequence) ABSL_LOCKS_EXCLUDED(pending_mu_, learner_mu_);

  // 64-bit FNV-1a digest of the model's full state: every byte a snapshot keeps of it (config
  // without the name, producers' offsets, sigma selection, the learner's serialized state:
  // warm-up buffer, episode state, CME, counts, RFF moments, latent and predictive
  // accumulators, spectral moments, lag statistics), without the name, WAL sequence and batch
  // count. Two models with equal digests hold the same state (fault and
  // lifecycle tests; ModelInfo.state_digest). O(model size) under the learner lock; an evicted
  // model answers the digest taken at its eviction (EVICTION below). ResidentDigest, the hash,
  // is defined in snapshot.cc, next to the encoder whose bytes it hashes.
  uint64_t StateDigest() ABSL_LOCKS_EXCLUDED(evict_mu_, learner_mu_, stats_mu_);

  // The change alarms kept (AlarmMonitor, the last AlarmMonitor::kMaxRecords) with index >=
  // `since`, oldest first; `dropped` counts the older alarms no longer kept that would match.
  // Copied under the learner lock. FailedPrecondition for a model without alarms.
  struct AlarmList {
    int64_t armed_at = -1;
    std::vector<AlarmRecord> alarms;
    uint64_t dropped = 0;
  };
  // An evicted model answers from the alarms it kept at its eviction (no reload).
  absl::StatusOr<AlarmList> Alarms(uint64_t since) const ABSL_LOCKS_EXCLUDED(learner_mu_, evict_mu_);

  // Applied offset of a producer; 0 for a producer never seen.
  uint64_t ProducerOffset(const std::string& producer_id) const ABSL_LOCKS_EXCLUDED(stats_mu_);
  bool producer_offsets_known(const std::string& producer_id) const ABSL_LOCKS_EXCLUDED(stats_mu_);
  // Producers whose offsets are kept (<= kMaxProducersPerModel).
  size_t producer_count() const ABSL_LOCKS_EXCLUDED(stats_mu_);

  // FAILURE. A learner that cannot go on with a record of its stream (StreamingLearner::Observe
  // or EndWarmup answer Internal: an estimator's data-derived option failed its validation)
  // leaves the model failed: from then on it refuses Ingest, EndWarmup and the view queries
  // with FailedPrecondition naming the record and the reason (Failed()), the refresh skips it,
  // its learner state is not kept (a snapshot keeps its config, producers and the failure, with
  // a fresh learner), and only deletion changes it. The daemon and every other model go on;
  // replay of its records marks it failed the same way and goes on (recovery.cc). No stream
  // is known to reach it (tests/integration/test_stream_fuzz.py); the testing hook
  // SetFailOnValueForTesting forces it.
  struct Failure {
    uint64_t sequence = 0;  // the WAL record it could not learn (0 without a WAL)
    std::string reason;
  };
  std::optional<Failure> failure() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  bool failed() const { return failed_.load(); }
  // FailedPrecondition naming the model, the record and the reason (requires: failed()).
  absl::Status Failed() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  // Testing only (cmestreamd --testing-fail-on-value): a batch holding exactly `value` fails
  // its model as an estimator failure would, on ingest and on replay. Process-wide.
  static void SetFailOnValueForTesting(std::optional<double> value);

  // Counters as of the last completed batch or refresh.
  struct Stats {
    bool learner_ready = false;  // false while sigma "auto" warm-up is buffering
    uint64_t samples = 0;
    uint64_t pending_warmup = 0;
    int dict_x = 0, dict_y = 0;
    int spectral_basis = 0;  // the spectral moments' basis (StreamingLearner::spectral_basis; 0: none)
    uint64_t forced = 0;
    double forced_error_sum = 0;
    double inverse_drift = 0;
    uint64_t batches_applied = 0;
    // Change alarms (config alarms "on"): AlarmMonitor's counters after the last batch.
    bool alarms = false;
    uint64_t alarms_scored = 0;
    int64_t armed_at = -1;
    uint64_t alarms_total = 0;
    uint64_t progress = 0;  // StreamingLearner::learned_total: grows even across a reset
    double change_score = 0;
    double change_threshold = 0;
    // "alarm monitor from format vN re-armed at pair P" for a monitor restored from an older
    // format (AlarmMonitor::RearmNote), else empty.
    std::string alarm_note;
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  // With `with_memory`, also ModelInfo.memory (GetModelRequest.with_memory).
  v1::ModelInfo Describe(bool with_memory = false) const ABSL_LOCKS_EXCLUDED(stats_mu_, view_mu_, mem_mu_);

  // Refresh support. Snapshot() copies what the views need under the learner lock and changes
  // nothing (StreamingLearner::CopyForSnapshot; the open CME run is folded into the copies
  // after the lock is released, SnapshotCopy::Finish): the Gram-inverse drift check and re-factorization
  // (docs/algorithms.md §1.7) run inside CompressedCme::Observe on a sample-count schedule, and
  // the embedding moments fold their buffered pairs into a copy. A refresh that touched the
  // learner would make its state depend on wall-clock timing, and WAL replay / snapshots could
  // not reproduce it bit for bit. Returns nullopt while there is no learner yet (warm-up).
  // Discrete models have no CME: cme is empty and inverse_drift 0.
  struct LearnerSnapshot : StreamingLearnerSnapshot {
    uint64_t applied_sequence = 0;  // WAL: the snapshot covers this model's records <= it
    uint64_t progress = 0;          // Stats::progress at the copy
  };
  std::optional<LearnerSnapshot> Snapshot() ABSL_LOCKS_EXCLUDED(learner_mu_, stats_mu_);

  std::shared_ptr<const ModelView> view() const ABSL_LOCKS_EXCLUDED(view_mu_);
  void Publish(std::shared_ptr<const ModelView> view) ABSL_LOCKS_EXCLUDED(view_mu_);

  // Test-then-train score (docs/user-guide.md "The held-out score"): from now on every pair
  // applied to the model is first scored by `score` (the published view's VAMP model), which
  // replaces the previous window (StreamingLearner::InstallPrequential). Takes the learner lock
  // briefly (waits for a batch in progress). The window is not learner state: not in snapshots
  // nor in StateDigest, and it restarts empty after a restart.
  // Lends the learner helper threads (StreamingLearner::SetSideExecutor; null: none). Takes the
  // learner lock briefly. Not state: the state is the same, bit for bit, either way.
  void SetSideExecutor(SideExecutor* executor) ABSL_LOCKS_EXCLUDED(learner_mu_);
  void InstallPrequential(std::unique_ptr<PrequentialVampE> score, uint64_t view_version)
      ABSL_LOCKS_EXCLUDED(learner_mu_);

  // MEMORY (service/engine/memory_budget.h, MemoryLedger). The registry attaches the daemon's
  // ledger with the bytes it charged the model (its floor, or what a restored model holds);
  // before each live batch the model asks it for room to grow its dictionary to the capacity
  // the batch could need (GrantDictionaryCap), and after the batch its charge follows the
  // sizes it reached (a spectral re-base included: it takes at most the granted dictionary). The cap in force is logged
  // with the batch (IngestBatch.dictionary_cap, 0 when the whole growth was granted) and a replay applies the logged
  // cap: the state is a function of the records alone. Forks and the explicit end of a warm-up learn uncapped (their
  // growth is charged after the fact).
  void AttachLedger(MemoryLedger* ledger, double charged) ABSL_LOCKS_EXCLUDED(mem_mu_);
  // At deletion: releases the model's charge; nothing is charged afterwards.
  void DetachLedger() ABSL_LOCKS_EXCLUDED(mem_mu_);
  // What the model holds now by the estimate at its learner's sizes: the CME's capacity and atoms,
  // the spectral moments' bases (EstimateModelMemory of ShapeLocked).
  double HeldBytesEstimate() const ABSL_LOCKS_EXCLUDED(learner_mu_);
  // The sizes its learner's state is allocated at now (all 0 while evicted).
  ModelShape Shape() const ABSL_LOCKS_EXCLUDED(learner_mu_);
  struct MemoryStatus {
    double charged_bytes = 0;     // counted in the ledger for it
    uint32_t dictionary_cap = 0;  // the cap of its last batch (0: none, max_dict)
    uint64_t growth_denied = 0;   // batches whose dictionary reached the cap the budget set
  };
  MemoryStatus memory() const ABSL_LOCKS_EXCLUDED(mem_mu_);

  // EVICTION (docs/user-guide.md "Fleets", service/README.md "Eviction"). A model that received
  // no batch and no query for --evict-idle-seconds, and whose view reflects everything it
  // learned, is written to a file of its own (ModelSpill: the export format, CRC-checked, not
  // fsynced: the next daemon snapshot makes it durable when it references it) and its learner is freed; its memory
  // charge is released. Its config, counters, producer offsets, latest view, kept alarms and state digest stay in
  // memory and keep answering (Describe, the view queries, Alarms, StateDigest). The next batch, fork share or end of
  // warm-up loads the learner back under the sequencer (ReloadLocked: the reloaded state's digest must equal the one
  // taken at the eviction, else DataLoss and the model stays evicted) and charges it again whatever the budget (what
  // was acknowledged is never refused). A daemon snapshot references an evicted model's file (a pin, format 3) and an
  // export copies its MODL object (ModelSnapshotCodec::Part, Image). The sweep runs on the refresh scheduler's thread
  // (RefreshScheduler: no thread or timer per model). Lock order: the sequencer, evict_mu_, the
  // log lock, the learner lock.
  // RESTART: a daemon snapshot stores with an evicted model what it keeps in memory (an EVCT
  // object after its file's reference: storage/snapshot.h), and recovery restores it evicted,
  // its learner in the snapshot's pinned file (linked back under DATA_DIR/evicted), with no view: a view query or
  // Refresh asks the scheduler, which loads it back and builds the view (refresh.cc).
  //
  // Marks the model used now (a batch or a view query).
  void Touch() const;
  double idle_seconds() const;
  bool evicted() const { return evicted_.load(); }
  // requires: called before the model is shared between threads (the registry, at publish).
  void SetSpill(ModelSpill* spill) { spill_ = spill; }
  // Evicts the model if it is still idle for `idle_seconds` and resident, not failed, not
  // deleted and no batch of it is in flight (never waits for one: the sequencer is tried).
  // True if it was evicted now; the spill's error if its file could not be written (the model
  // stays resident).
  absl::StatusOr<bool> EvictIfIdle(double idle_seconds) ABSL_LOCKS_EXCLUDED(ingest_mu_, evict_mu_, learner_mu_);
  // Loads an evicted model back now (a no-op when resident); NotFound once deleted.
  absl::Status EnsureResident() ABSL_LOCKS_EXCLUDED(ingest_mu_, evict_mu_, learner_mu_);
  // At deletion (after MarkDeleted): the eviction count the metrics hold for it goes.
  void ForgetEviction() ABSL_LOCKS_EXCLUDED(evict_mu_);
  // Seconds the last reload took (0: never reloaded): Describe reports it.
  double last_reload_seconds() const { return last_reload_seconds_.load(); }
  // RESTART: restored evicted and no view published since (evicted, or being loaded back and
  // its view built).
  bool awaiting_view() const { return awaiting_view_.load(); }

  // Scheduler bookkeeping (touched by the scheduler thread, Refresh requests and the view
  // queries of a model restored evicted without a view).
  mutable std::atomic<bool> refresh_requested{false};
  // Starts at creation, so the first interval-triggered view comes refresh_interval after it.
  std::chrono::steady_clock::time_point last_refresh_attempt = std::chrono::steady_clock::now();  // scheduler only

 private:
  // service/storage/snapshot.cc reads and restores the full state (under learner_mu_).
  friend class ModelSnapshotCodec;

  // The codec's: a model around a learner restored from a snapshot.
  Model(v1::ModelConfig config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log, StreamingLearner learner);
  // The codec's: a model restored evicted (RESTART in EVICTION above): no learner, its learner in
  // the file `path`, what an evicted model keeps in memory as given; not counted in a ledger.
  struct EvictedState {
    std::string path;
    uint64_t applied_sequence = 0;
    uint64_t digest = 0;
    std::optional<AlarmList> alarms;
    Stats stats;
    std::map<std::string, uint64_t> producer_offsets;
    v1::SigmaSelection sigma;
    v1::InputScaling scaling;
  };
  Model(v1::ModelConfig config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log, EvictedState state);

  // The learner's counters.
  Stats LearnerStatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(learner_mu_);
  // After the learner changed under learner_mu_: publishes its counters, and the sigma
  // selection and scaler when `warmup_finished`.
  Stats PublishLocked(bool warmup_finished, uint64_t batches_added, const std::string* producer_id,
                      uint64_t offset_after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(learner_mu_) ABSL_LOCKS_EXCLUDED(stats_mu_);
  void SetPending(uint64_t sequence) ABSL_LOCKS_EXCLUDED(pending_mu_);  // 0: none in flight
  // Marks the model failed at `sequence` (see failure()); drops its view.
  void MarkFailedLocked(uint64_t sequence, absl::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(learner_mu_)
      ABSL_LOCKS_EXCLUDED(stats_mu_, view_mu_);

  // Step (a) of Ingest: under log_mu_, de-duplicates the batch against the producer's offset
  // and (unless replaying) writes its record. Not durable yet on return.
  struct Admission {
    int64_t first = 0;          // first pair of the batch not applied before
    uint64_t offset_after = 0;  // the producer's applied offset once the batch is applied
    uint64_t sequence = 0;      // the batch's WAL record (0: nothing to log or no WAL)
    bool written = false;       // a record was written now (not replay): wait for durability
  };
  absl::StatusOr<Admission> AdmitAndLog(const PairBatch& batch, const std::string& producer_id, uint64_t offset,
                                        uint64_t batch_index, const std::string& episode_id,
                                        std::optional<uint64_t> replay_sequence) ABSL_LOCKS_EXCLUDED(log_mu_);

  // Before a live batch of `pairs` pairs: the dictionary cap it is learned with (0: none),
  // growth charged to the ledger as granted (MEMORY above).
  uint32_t GrantDictionaryCap(int64_t pairs) ABSL_LOCKS_EXCLUDED(learner_mu_, mem_mu_);
  // After a batch learned with dictionary cap `cap` (0: none): the charge follows the
  // dictionary's capacity (never below the floor); a dictionary at the cap counts as denied growth.
  void SettleMemory(uint32_t cap) ABSL_LOCKS_EXCLUDED(learner_mu_, mem_mu_);
  // HeldBytesEstimate, and the larger side's atoms into `atoms` (if not null).
  double HeldBytesAndAtoms(int* atoms) const ABSL_LOCKS_EXCLUDED(learner_mu_);
  // The sizes the learner's state is allocated at now (memory_budget.h). requires: a learner.
  // `bases` (if not null): the spectral moments' bases and re-base schedule it read.
  ModelShape ShapeLocked(StreamingLearner::SpectralBases* bases = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(learner_mu_);

  // EvictIfIdle once the sequencer is held.
  absl::StatusOr<bool> EvictLocked(double idle_seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ingest_mu_)
      ABSL_LOCKS_EXCLUDED(evict_mu_, learner_mu_);
  // Under the sequencer: loads an evicted learner back (EVICTION above).
  absl::Status ReloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ingest_mu_) ABSL_LOCKS_EXCLUDED(evict_mu_, learner_mu_);
  // The state digest of the resident learner (StateDigest without the eviction check).
  uint64_t ResidentDigest() ABSL_LOCKS_EXCLUDED(learner_mu_, stats_mu_);

  // FailedPrecondition for Ingest and EndWarmup on a fork, naming its parent.
  absl::Status RefusedForkIngest() const;
  // Under the learner lock, after a batch was applied: what it brings the forks (ForkPlan), from
  // the parent's alarms before it and `pairs_before` (AlarmMonitor::pairs() before it).
  ForkPlan PlanForksLocked(int64_t alarms_before, int64_t index_before, int64_t pairs_before, int64_t applied_rows,
                           int64_t learned_pairs) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(learner_mu_);

  const v1::ModelConfig config_;
  const std::shared_ptr<ModelMetrics> metrics_;
  ForkSink* fork_sink_ = nullptr;
  BatchLog* const log_;
  const double created_unix_seconds_;
  std::atomic<uint64_t> applied_sequence_{0};  // written under learner_mu_

  absl::Mutex ingest_mu_ ABSL_ACQUIRED_BEFORE(evict_mu_);
  // Held while the model is evicted or reloaded and while a snapshot or export copies it, so
  // each sees it either resident or in its file. Held across that file's I/O (not the learner lock).
  mutable absl::Mutex evict_mu_ ABSL_ACQUIRED_BEFORE(log_mu_);
  std::string evicted_path_ ABSL_GUARDED_BY(evict_mu_);  // non-empty: evicted, the learner is in this file
  uint64_t evicted_digest_ ABSL_GUARDED_BY(evict_mu_) = 0;
  std::optional<AlarmList> evicted_alarms_ ABSL_GUARDED_BY(evict_mu_);  // every kept alarm, at the eviction
  bool eviction_forgotten_ ABSL_GUARDED_BY(evict_mu_) = false;          // deleted: no longer counted
  std::atomic<bool> evicted_{false};
  mutable std::atomic<int64_t> last_used_ns_{0};  // steady clock
  std::atomic<double> last_reload_seconds_{0};
  std::atomic<bool> awaiting_view_{false};  // awaiting_view()
  ModelSpill* spill_ = nullptr;
  SideExecutor* side_executor_ = nullptr;  // re-lent to a reloaded learner
  absl::Mutex log_mu_ ABSL_ACQUIRED_BEFORE(learner_mu_);
  bool deleted_ ABSL_GUARDED_BY(log_mu_) = false;

  mutable absl::Mutex learner_mu_ ABSL_ACQUIRED_BEFORE(stats_mu_);
  // Null while the model is evicted (EVICTION above).
  std::unique_ptr<StreamingLearner> learner_ ABSL_GUARDED_BY(learner_mu_);

  absl::Mutex pending_mu_;                                      // a leaf
  absl::CondVar pending_cv_;                                    // pending_sequence_ changed
  uint64_t pending_sequence_ ABSL_GUARDED_BY(pending_mu_) = 0;  // written, not yet applied

  mutable absl::Mutex stats_mu_;  // a leaf
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::map<std::string, uint64_t> producer_offsets_ ABSL_GUARDED_BY(stats_mu_);
  v1::SigmaSelection published_sigma_ ABSL_GUARDED_BY(stats_mu_);
  v1::InputScaling published_scaling_ ABSL_GUARDED_BY(stats_mu_);
  std::optional<Failure> failure_ ABSL_GUARDED_BY(stats_mu_);
  std::atomic<bool> failed_{false};  // failure_ is set (read without a lock on the ingest path)

  mutable absl::Mutex view_mu_;  // a leaf
  std::shared_ptr<const ModelView> view_ ABSL_GUARDED_BY(view_mu_);

  mutable absl::Mutex mem_mu_;  // a leaf (the ledger is lock-free)
  MemoryLedger* ledger_ ABSL_GUARDED_BY(mem_mu_) = nullptr;
  double charged_ ABSL_GUARDED_BY(mem_mu_) = 0;
  double floor_ ABSL_GUARDED_BY(mem_mu_) = 0;
  uint32_t last_cap_ ABSL_GUARDED_BY(mem_mu_) = 0;
  uint64_t growth_denied_ ABSL_GUARDED_BY(mem_mu_) = 0;
  bool counted_ ABSL_GUARDED_BY(mem_mu_) = true;  // counted in the ledger (false while evicted)
};

}  // namespace cmestream::service
