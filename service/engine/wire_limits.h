// Bounds shared by ingestion and the decoders of the write-ahead log and snapshots.
//
// Why one header: whatever the daemon acknowledges must be writable and readable back by its
// own snapshot and WAL code. Before these were shared, ingestion accepted a 4,097-byte
// producer id that the snapshot decoder refused (4,096), so one client made every later
// snapshot unusable. Every bound below is checked at ingestion (INVALID_ARGUMENT /
// RESOURCE_EXHAUSTED, nothing applied) and again, with the same constant, by the decoders.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cmestream::service {

// IngestBatch.producer_id and IngestBatch.episode_id, in bytes.
inline constexpr size_t kMaxProducerIdBytes = 256;
inline constexpr size_t kMaxEpisodeIdBytes = 256;
// Distinct producers whose offsets one model keeps (each costs about 300 bytes in memory and
// in every snapshot). The next new producer is refused with RESOURCE_EXHAUSTED.
inline constexpr int64_t kMaxProducersPerModel = 100000;
// Model names (model_config.cc ValidName) in bytes.
inline constexpr size_t kMaxModelNameBytes = 64;
// A serialized ModelConfig / SigmaSelection message in a snapshot.
inline constexpr uint64_t kMaxConfigBytes = 1 << 20;
// Default bound on |value| of every ingested coordinate (--max-abs-value). Finite values near
// the double range (1e200, 1e308) overflow squared distances and poison a model's Koopman and
// embedding views for good; a sensor stream has no business near them.
inline constexpr double kDefaultMaxAbsValue = 1e12;

}  // namespace cmestream::service
