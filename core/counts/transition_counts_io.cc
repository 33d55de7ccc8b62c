// TransitionCounts::Serialize / Deserialize, declared in core/counts/transition_counts.h. Framing:
// core/io/binary_io.h; field lists: core/io/field_io.h (CONTRIBUTING.md "Binary formats").
// Object "CNTS": the options (what the constructor needs), the scalars, then the live blocks of
// the buffers. Capacity-sized buffers are written as their live blocks only: outside the live
// block they hold zeros both in a fresh object and in the running one (the learner only writes
// inside it), and the round-trip tests compare the re-serialized state after further samples.
// Scratch buffers that are recomputed before every read are not stored.
#include "core/counts/transition_counts.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("CNTS"), 1, "TransitionCounts"};

// TransitionCounts (§2).
constexpr auto kCountsOptionFields = [](auto& f, auto& o) {
  f.Scalars("counts", io::Field("max_states", o.max_states), io::Field("forgetting", o.forgetting),
            io::Field("row_reserve", o.row_reserve));
};

}  // namespace

void TransitionCounts::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  kCountsOptionFields(f, options_);
  w.I32(num_states_);
  w.I64(samples_);
  w.I64(nnz_);
  w.F64(scale_);
  w.F64(total_stored_);
  w.Doubles(visits_stored_.data(), num_states_);
  for (int i = 0; i < num_states_; ++i) {
    const std::vector<Entry>& row = rows_[i];
    w.U64(row.size());
    for (const Entry& e : row) {
      w.I32(e.j);
      w.F64(e.stored);
    }
  }
}

absl::StatusOr<TransitionCounts> TransitionCounts::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kCountsOptionFields);
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  // rows_ (one empty vector each) and visits_stored_.
  if (!r.Reserve(static_cast<uint64_t>(o.max_states) * (sizeof(std::vector<Entry>) + 8), "TransitionCounts rows")) {
    return r.status();
  }
  const int num_states = r.I32In("counts num_states", 0, o.max_states);
  const int64_t samples = r.NonNegativeI64("counts samples");
  const int64_t nnz = r.NonNegativeI64("counts nonzeros");
  const double scale = r.F64("counts scale");
  const double total = r.F64("counts total_stored");
  if (!r.ok()) return r.status();
  if (!(scale >= 1)) return r.Fail(absl::StrCat("counts scale is ", scale, ", expected >= 1"));
  TransitionCounts t(o);
  t.num_states_ = num_states;
  t.samples_ = samples;
  t.nnz_ = nnz;
  t.scale_ = scale;
  t.total_stored_ = total;
  r.Doubles("counts visits", num_states, t.visits_stored_.data());
  int64_t seen = 0;
  for (int i = 0; i < num_states && r.ok(); ++i) {
    const int64_t n = r.Count("counts row length", 0, num_states);
    // Each entry is 12 bytes on disk: bounded by the bytes left before reserving.
    if (!r.ok() || n * 12 > static_cast<int64_t>(r.remaining())) {
      return r.Fail(absl::StrCat("counts row ", i, " claims ", n, " entries, more than the bytes left"));
    }
    std::vector<Entry>& row = t.rows_[i];
    row.reserve(std::max<int64_t>(n, o.row_reserve));
    int prev = -1;
    for (int64_t k = 0; k < n; ++k) {
      const int j = r.I32In("counts column", 0, num_states - 1);
      const double stored = r.F64("counts value");
      if (r.ok() && j <= prev) {
        return r.Fail(absl::StrCat("counts row ", i, ": columns not increasing (", prev, " then ", j, ")"));
      }
      prev = j;
      row.push_back(Entry{j, stored});
    }
    seen += n;
  }
  if (r.ok() && seen != nnz) return r.Fail(absl::StrCat("counts hold ", seen, " entries but the header says ", nnz));
  if (!r.EndObject(kFormat.name)) return r.status();
  return t;
}

}  // namespace cmestream
