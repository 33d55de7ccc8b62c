#include "service/engine/batch.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/common/validate.h"

namespace cmestream::service {
namespace {

BatchCheck Reject(std::string reason, uint64_t index, const std::string& model, const std::string& what) {
  BatchCheck c;
  c.reason = std::move(reason);
  c.status = absl::InvalidArgumentError(absl::StrCat("batch ", index, ": ", what, " (model '", model, "')"));
  return c;
}

// First value of a packed field with |v| > max_abs, or -1.
int64_t FirstTooLarge(const google::protobuf::RepeatedField<double>& v, double max_abs) {
  for (int i = 0; i < v.size(); ++i) {
    if (std::abs(v.Get(i)) > max_abs) return i;
  }
  return -1;
}

// producer_id and episode_id are stored in every snapshot and WAL record: their bounds are the
// decoders' (wire_limits.h), so what is acknowledged can always be read back.
BatchCheck CheckIds(const v1::IngestBatch& b, uint64_t index) {
  const auto too_long = [&](const char* field, size_t size, size_t limit) {
    return Reject("id_length", index, b.model(),
                  absl::StrCat("field ", field, " is ", size, " bytes long, expected at most ", limit, " bytes"));
  };
  if (b.producer_id().size() > kMaxProducerIdBytes) {
    return too_long("producer_id", b.producer_id().size(), kMaxProducerIdBytes);
  }
  if (b.episode_id().size() > kMaxEpisodeIdBytes) {
    return too_long("episode_id", b.episode_id().size(), kMaxEpisodeIdBytes);
  }
  if (b.end_warmup()) {
    return Reject("payload_form", index, b.model(),
                  "field end_warmup is set, expected it unset: only the daemon's log writes it (call Refresh to end "
                  "the warm-up early)");
  }
  if (b.gap() && b.states_size() == 0 && b.state_ids_size() == 0) {
    return Reject("payload_form", index, b.model(),
                  "field gap is set on a batch of pairs, expected it only on a trajectory (states or state_ids): a "
                  "gap marks a break between trajectory rows");
  }
  return BatchCheck{};
}

}  // namespace

BatchCheck ValidateBatch(const v1::IngestBatch& b, int dim, uint64_t index, double max_abs) {
  const std::string& model = b.model();
  if (BatchCheck c = CheckIds(b, index); !c.status.ok()) return c;
  if (b.x_ids_size() > 0 || b.y_ids_size() > 0 || b.state_ids_size() > 0) {
    return Reject("payload_form", index, model,
                  absl::StrCat("state ids (x_ids/y_ids/state_ids) are set, expected x/y or states of dim ", dim,
                               " for this continuous model"));
  }
  const bool has_pairs = b.x_size() > 0 || b.y_size() > 0;
  const bool has_states = b.states_size() > 0;
  if (has_pairs && has_states) {
    return Reject("payload_form", index, model, "both x/y and states are set, expected exactly one payload form");
  }
  if (!has_pairs && !has_states) {
    return Reject("empty", index, model, "no pairs: x, y and states are all empty, expected at least one pair");
  }
  const auto bad_size = [&](absl::string_view field, int size, absl::string_view expected) {
    return Reject("size", index, model, absl::StrCat("field ", field, " has ", size, " values, expected ", expected));
  };
  const std::string multiple = absl::StrCat("a multiple of dim ", dim);
  BatchCheck ok;
  ok.batch.dim = dim;
  ok.batch.time = b.received_unix_seconds();
  ok.batch.dictionary_cap = b.dictionary_cap();
  if (has_pairs) {
    if (b.x_size() % dim != 0) return bad_size("x", b.x_size(), multiple);
    if (b.y_size() % dim != 0) return bad_size("y", b.y_size(), multiple);
    if (b.y_size() != b.x_size()) return bad_size("y", b.y_size(), absl::StrCat(b.x_size(), " (as many as x)"));
    for (const auto* field : {&b.x(), &b.y()}) {
      const absl::Status finite =
          CheckFiniteValues(field == &b.x() ? "x" : "y", "pair", field->data(), field->size(), dim);
      if (!finite.ok()) return Reject("non_finite", index, model, std::string(finite.message()));
    }
    for (const auto* field : {&b.x(), &b.y()}) {
      const int64_t big = FirstTooLarge(*field, max_abs);
      if (big >= 0) {
        return Reject(
            "magnitude", index, model,
            absl::StrCat("field ", field == &b.x() ? "x" : "y", " value ", big, " (pair ", big / dim, ", component ",
                         big % dim, ") is ", field->Get(big), ", expected |value| <= ", max_abs, " (--max-abs-value)"));
      }
    }
    ok.batch.n = b.x_size() / dim;
    ok.batch.x = b.x().data();
    ok.batch.y = b.y().data();
  } else {
    if (b.states_size() % dim != 0) return bad_size("states", b.states_size(), multiple);
    if (b.states_size() < 2 * dim) {
      return bad_size("states", b.states_size(), absl::StrCat("at least 2 states (", 2 * dim, " values)"));
    }
    const absl::Status finite = CheckFiniteValues("states", "state", b.states().data(), b.states_size(), dim);
    if (!finite.ok()) return Reject("non_finite", index, model, std::string(finite.message()));
    const int64_t big = FirstTooLarge(b.states(), max_abs);
    if (big >= 0) {
      return Reject("magnitude", index, model,
                    absl::StrCat("field states value ", big, " (state ", big / dim, ", component ", big % dim, ") is ",
                                 b.states(big), ", expected |value| <= ", max_abs, " (--max-abs-value)"));
    }
    ok.batch.n = b.states_size() / dim - 1;
    ok.batch.x = b.states().data();
    ok.batch.y = b.states().data() + dim;
    ok.batch.trajectory = true;
    ok.batch.gap = b.gap();
  }
  return ok;
}

BatchCheck ValidateDiscreteBatch(const v1::IngestBatch& b, uint32_t num_states, uint64_t index) {
  const std::string& model = b.model();
  if (BatchCheck c = CheckIds(b, index); !c.status.ok()) return c;
  if (b.x_size() > 0 || b.y_size() > 0 || b.states_size() > 0) {
    return Reject("payload_form", index, model,
                  absl::StrCat("vectors (x/y/states) are set, expected state ids x_ids/y_ids or state_ids for this "
                               "discrete model (num_states ",
                               num_states, ")"));
  }
  const bool has_pairs = b.x_ids_size() > 0 || b.y_ids_size() > 0;
  const bool has_states = b.state_ids_size() > 0;
  if (has_pairs && has_states) {
    return Reject("payload_form", index, model,
                  "both x_ids/y_ids and state_ids are set, expected exactly one payload form");
  }
  if (!has_pairs && !has_states) {
    return Reject("empty", index, model,
                  "no pairs: x_ids, y_ids and state_ids are all empty, expected at least one pair");
  }
  const auto check_ids = [&](absl::string_view field,
                             const google::protobuf::RepeatedField<int64_t>& ids) -> BatchCheck {
    const absl::Status in_range = CheckStateIds(field, ids.data(), ids.size(), num_states);
    if (!in_range.ok()) return Reject("state_id", index, model, std::string(in_range.message()));
    return BatchCheck{};
  };
  BatchCheck ok;
  ok.batch.dim = 0;
  ok.batch.time = b.received_unix_seconds();
  ok.batch.dictionary_cap = b.dictionary_cap();
  if (has_pairs) {
    if (b.y_ids_size() != b.x_ids_size()) {
      return Reject("size", index, model,
                    absl::StrCat("field y_ids has ", b.y_ids_size(), " values, expected ", b.x_ids_size(),
                                 " (as many as x_ids)"));
    }
    for (auto [field, ids] :
         {std::pair<const char*, const google::protobuf::RepeatedField<int64_t>*>{"x_ids", &b.x_ids()},
          {"y_ids", &b.y_ids()}}) {
      BatchCheck c = check_ids(field, *ids);
      if (!c.status.ok()) return c;
    }
    ok.batch.n = b.x_ids_size();
    ok.batch.x_ids = b.x_ids().data();
    ok.batch.y_ids = b.y_ids().data();
  } else {
    if (b.state_ids_size() < 2) {
      return Reject("size", index, model,
                    absl::StrCat("field state_ids has ", b.state_ids_size(), " values, expected at least 2"));
    }
    BatchCheck c = check_ids("state_ids", b.state_ids());
    if (!c.status.ok()) return c;
    ok.batch.n = b.state_ids_size() - 1;
    ok.batch.x_ids = b.state_ids().data();
    ok.batch.y_ids = b.state_ids().data() + 1;
    ok.batch.trajectory = true;
    ok.batch.gap = b.gap();
  }
  return ok;
}

}  // namespace cmestream::service
