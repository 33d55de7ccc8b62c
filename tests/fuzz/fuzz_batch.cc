// libFuzzer target: arbitrary bytes -> IngestBatch -> the daemon's batch checks.
//
// Byte 0 chooses the model the batch is validated against (continuous dim 1..8 or discrete
// num_states 1..256, as ValidateBatch / ValidateDiscreteBatch are called by the ingestor);
// the rest is parsed as an IngestBatch wire message (unparseable input is skipped: gRPC
// would refuse it before the handler). Then, as in Ingestor::Apply:
//   CheckBatchPairs (--max-batch-pairs, here 1000) -> Validate*Batch -> read every pair.
// Must never crash, leak or read out of bounds (ASan), and an accepted batch must satisfy
// the validator's contract (batch.h), checked here with __builtin_trap:
//   n >= 1; every x/y value finite (continuous); every id in [0, P) (discrete);
//   trajectories: y = x shifted by one state.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cmestream/v1/cmestream.pb.h"
#include "service/batch.h"
#include "service/limits.h"

namespace {

void Require(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cmestream;
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const bool discrete = selector & 1;
  const int dim = 1 + (selector >> 1) % 8;
  const uint32_t num_states = 1 + (selector >> 1);  // 1..128
  v1::IngestBatch batch;
  if (!batch.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;

  service::LimitOptions limits;
  limits.max_batch_pairs = 1000;
  if (!service::CheckBatchPairs(batch, discrete ? 0 : dim, 7, limits).ok()) return 0;

  const service::BatchCheck check =
      discrete ? service::ValidateDiscreteBatch(batch, num_states, 7) : service::ValidateBatch(batch, dim, 7);
  if (!check.status.ok()) {
    Require(!check.reason.empty());
    Require(!check.status.message().empty());
    return 0;
  }
  const service::PairBatch& b = check.batch;
  Require(b.n >= 1 && b.n <= limits.max_batch_pairs);
  Require(b.discrete() == discrete);
  double sum = 0;
  for (int64_t i = 0; i < b.n; ++i) {
    if (discrete) {
      Require(b.x_ids[i] >= 0 && b.x_ids[i] < num_states);
      Require(b.y_ids[i] >= 0 && b.y_ids[i] < num_states);
      if (b.trajectory && i + 1 < b.n) Require(b.y_ids[i] == b.x_ids[i + 1]);
    } else {
      for (int k = 0; k < b.dim; ++k) {
        Require(std::isfinite(b.x_at(i)[k]) && std::isfinite(b.y_at(i)[k]));
        sum += b.x_at(i)[k] - b.y_at(i)[k];
      }
      if (b.trajectory && i + 1 < b.n) Require(b.y_at(i)[0] == b.x_at(i + 1)[0]);
    }
  }
  Require(!std::isnan(sum) || !discrete);
  return 0;
}
