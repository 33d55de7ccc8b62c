// Model configuration: defaults, validation and the mapping onto the core learner's Options
// (core/stream/streaming_learner.h).
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "core/cme/compressed_cme.h"
#include "core/stream/delay_embedding.h"
#include "core/stream/learner_view.h"
#include "core/stream/streaming_learner.h"

namespace cmestream::service {

// Defaults that are not fixed by the API but by the daemon (its flags).
struct ConfigDefaults {
  double refresh_interval_seconds = 2.0;  // --refresh-interval
};

// Bounds that keep one model's memory predictable: the learner preallocates about
// 6 * max_dict^2 doubles (W, its average, two Grams and their inverses), i.e. 48 MB at the
// default max_dict = 1000 and 768 MB at kMaxDictCap.
inline constexpr uint32_t kMaxDictCap = 4000;
inline constexpr uint32_t kMaxDim = 4096;
inline constexpr uint32_t kMinAutoSigmaWarmup = 20;      // SelectBandwidth needs n >= 20
inline constexpr uint32_t kMaxAutoSigmaWarmup = 100000;  // buffered in memory

// Bounds of the streaming statistics and views (docs/algorithms.md §2-6). Memory per model is dominated by
// the RFF moments (3 rff_features^2 doubles: 400 MB at kMaxRffFeatures), the latent moments
// (3 D^2, D = rff_features or num_states) and the predictive statistics.
inline constexpr uint32_t kMaxNumStates = 100000;  // discrete models: counts are sparse
// Discrete embedding/clusters: dense P x P, O(P^3); the limit the view fits apply.
inline constexpr uint32_t kMaxDenseStates = static_cast<uint32_t>(cmestream::kMaxDenseStates);
inline constexpr uint32_t kDefaultRffFeatures = 256;
inline constexpr uint32_t kMaxRffFeatures = 4096;
inline constexpr double kMinForgetting = 1e-6;  // TransitionCounts' lower bound
inline constexpr uint32_t kMaxRank = 1000;
inline constexpr uint32_t kMaxClusters = 1000;
inline constexpr uint32_t kMaxMetaStates = 1000;
inline constexpr uint32_t kMaxLatentSymbols = 2048;        // one-hot latent features: 3 P^2 moments
inline constexpr uint64_t kMaxReservoirValues = 30000000;  // 3 * reservoir * dim doubles (240 MB)
inline constexpr uint32_t kMaxWindow = 16;
inline constexpr double kMaxPredictiveDoubles = 1 << 23;  // discrete PSR statistics (64 MB)
inline constexpr double kMaxPredictiveSide = 512;         // linear-Gaussian: dim * (2 window + 1)

// Returns `in` with every optional field filled in (sigma "auto" is stored as 0), or
// InvalidArgument naming the first bad field and the expected value.
// ensures: the result maps onto a valid CompressedCme::Options (for any chosen sigma > 0).
absl::StatusOr<v1::ModelConfig> NormalizeModelConfig(const v1::ModelConfig& in, const ConfigDefaults& defaults);

// A config read back from a snapshot or an export: NormalizeModelConfig, except that a missing
// `scale` stays missing ("none": the file was written before input scaling existed, or the
// model was created unscaled), where a new model's default would be "auto"; likewise a missing
// `alarms` stays "off" and a missing `reduce` stays off.
absl::StatusOr<v1::ModelConfig> NormalizeStoredModelConfig(const v1::ModelConfig& stored,
                                                           const ConfigDefaults& defaults);

inline constexpr char kScaleAuto[] = "auto";
inline constexpr char kScaleNone[] = "none";
// Whether a normalized config scales its inputs (ModelConfig.scale "auto"; unset is "none").
inline bool ScalesInputs(const v1::ModelConfig& c) { return c.has_scale() && c.scale() == kScaleAuto; }
inline constexpr char kAlarmsOn[] = "on";
inline constexpr char kAlarmsOff[] = "off";
// Whether a normalized config keeps change alarms (ModelConfig.alarms "on"; unset is "off").
inline bool HasAlarms(const v1::ModelConfig& c) { return c.has_alarms() && c.alarms() == kAlarmsOn; }
inline constexpr char kOnChangeKeep[] = "keep";
inline constexpr char kOnChangeReset[] = "reset";
inline constexpr char kOnChangeFork[] = "fork";
// Whether a normalized config starts a fork at each alarm (ModelConfig.on_change "fork").
inline bool ForksOnChange(const v1::ModelConfig& c) { return c.has_on_change() && c.on_change() == kOnChangeFork; }
// Whether the model is a fork, fed only through its parent (ModelConfig.fork_of).
inline bool IsFork(const v1::ModelConfig& c) { return c.has_fork_of(); }
// The longest name of a model with on_change "fork": its forks are named "<name>.k" within the
// 64 bytes of a name, k up to 7 digits.
inline constexpr size_t kMaxForkingNameBytes = 56;
// The config of fork `k` of `parent` (normalized), started at the parent's alarm `index`: the
// parent's fields, named "<parent>.k", on_change "keep", fork_of and fork_index set.
v1::ModelConfig ForkConfig(const v1::ModelConfig& parent, int64_t k, int64_t index);
// ModelInfo.input_scaling: the mode, and the frozen scaler's (and reduction's) figures once the
// warm-up ended.
v1::InputScaling InputScalingProto(const v1::ModelConfig& c, const InputScaler* scaler,
                                   const InputReduction* reduction);
// Input reduction: a new continuous model with sigma auto, no delays and more than
// kReduceAboveDim dimensions reduces to kDefaultReduce (ModelConfig.reduce).
inline constexpr uint32_t kReduceAboveDim = 64;
inline constexpr uint32_t kDefaultReduce = 32;

// The delay embedding of a normalized config (ModelConfig.delays > 1), else nullopt: the one
// mapping of delays / delay_stride that the learner (LearnerOptionsFor) and the queries'
// windows of raw rows (service/rpc/query_service.cc) share.
std::optional<DelayEmbedding::Options> DelayOptionsFor(const v1::ModelConfig& c);

// requires: `c` came from NormalizeModelConfig. `sigma`: the bandwidth (> 0), or 0 for "auto"
// in the learner's options (which then fill in the chosen one).
CompressedCme::Options CmeOptionsFor(const v1::ModelConfig& c, double sigma);

// The model's learner: every field of the config the per-sample math reads (the CME's options
// with sigma 0 for "auto", warm-up, seed, forgetting, RFF features, latent, window, lags; lags
// empty when the model keeps no lag statistics, service/engine/lags.h), the episode key bounds of
// service/engine/wire_limits.h. requires: `c` came from NormalizeModelConfig.
// ensures: the result passes StreamingLearner::Options::Validate().
StreamingLearner::Options LearnerOptionsFor(const v1::ModelConfig& c);

// Values per state the estimators learn on: dim x delays (continuous), 1 (discrete ids).
// requires: `c` came from NormalizeModelConfig.
uint32_t StateDim(const v1::ModelConfig& c);

// What the views are fitted with (FitViews): the config's fit-time fields.
// requires: `c` came from NormalizeModelConfig. ensures: the result passes ViewOptions::Validate().
ViewOptions ViewOptionsFor(const v1::ModelConfig& c);

// The learner's sigma selection as the API's message and back (ModelInfo.sigma_selection, and
// the snapshot's MODL object, which stores the message's bytes).
v1::SigmaSelection SigmaSelectionProto(const SigmaSelection& s);
SigmaSelection SigmaSelectionFromProto(const v1::SigmaSelection& p);

}  // namespace cmestream::service
