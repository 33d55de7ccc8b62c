#include "service/engine/lags.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "service/engine/model_view.h"

namespace cmestream::service {
namespace {

std::vector<int> Lags(const v1::ModelConfig& c) { return std::vector<int>(c.lags().begin(), c.lags().end()); }

void Fill(const LagTimescales& t, v1::LagScan* out) {
  for (size_t k = 0; k < t.lags.size(); ++k) {
    out->add_lags(static_cast<uint32_t>(t.lags[k]));
    v1::LagTimescales* row = out->add_per_lag();
    for (double v : t.timescales[k]) row->add_timescales(v);
    for (double v : t.stderrs[k]) row->add_stderr(v);
    row->set_samples(t.pairs[k]);
  }
  out->set_blocks(static_cast<uint32_t>(t.blocks));
}

void Fill(const CkTest& ck, int k, v1::CkResult* out) {
  out->set_lag(static_cast<uint32_t>(ck.lag));
  out->set_clusters(static_cast<uint32_t>(k));
  out->set_max_deviation(ck.max_deviation);
  out->set_max_deviation_stderr(ck.max_deviation_stderr);
  out->set_blocks(static_cast<uint32_t>(ck.blocks));
  for (const CkStep& st : ck.steps) {
    v1::CkTestStep* s = out->add_steps();
    s->set_steps(static_cast<uint32_t>(st.steps));
    s->set_lag(static_cast<uint32_t>(st.lag));
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) {
        s->add_predicted(st.predicted(i, j));
        s->add_estimated(st.estimated(i, j));
        s->add_stderr(st.estimated_stderr(i, j));
        s->add_predicted_stderr(st.predicted_stderr(i, j));
      }
    }
    s->set_max_deviation(st.max_deviation);
    s->set_max_deviation_stderr(st.max_deviation_stderr);
  }
}

std::string Label(const std::string& model) { return absl::StrCat("model '", model, "'"); }

}  // namespace

absl::Status NormalizeLags(v1::ModelConfig& c) {
  if (c.lags().empty()) c.add_lags(1);
  LaggedMoments::Options o;
  o.lags = Lags(c);
  if (absl::Status s = o.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", c.name(), "': field lags is [", absl::StrJoin(o.lags, ","), "]: ", s.message(),
                     " (at most ", LaggedMoments::kMaxLags, " lags, each in 1..", LaggedMoments::kMaxLag, ")"));
  }
  if (c.num_states() > static_cast<uint32_t>(kMaxLagStates) && o.lags != std::vector<int>{1}) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", c.name(), "': field lags is [", absl::StrJoin(o.lags, ","),
                     "] but lag statistics of a discrete model ", "need num_states <= ", kMaxLagStates,
                     " (dense one-hot sums per lag and block); num_states is ", c.num_states()));
  }
  return absl::OkStatus();
}

bool HasLagStatistics(const v1::ModelConfig& c) {
  return c.num_states() == 0 || c.num_states() <= static_cast<uint32_t>(kMaxLagStates);
}

absl::Status FillTimescales(const std::string& model, const LagsView& lags, v1::TimescalesResponse* resp) {
  const LaggedMomentsSnapshot* s = lags.stats.counts ? &*lags.stats.counts : nullptr;
  if (!lags.counts) {
    return absl::FailedPreconditionError(absl::StrCat("model '", model, "': timescales not available: ", lags.error));
  }
  if (s && s->trajectory_states == 0 && s->unordered_pairs > 0 && s->lags != std::vector<int>{1}) {
    return absl::FailedPreconditionError(PairsOnlyReason(Label(model), *s));
  }
  resp->set_dt(lags.dt);
  resp->set_estimator(lags.koopman ? "koopman" : "counts");
  Fill(*lags.counts, resp->mutable_counts());
  if (lags.koopman) Fill(*lags.koopman, resp->mutable_koopman());
  resp->set_basis_size(static_cast<uint32_t>(lags.stats.discrete ? 0 : lags.stats.basis.rows()));
  resp->set_epoch(static_cast<uint64_t>(lags.stats.epoch));
  return absl::OkStatus();
}

absl::Status FillCkTest(const std::string& model, const v1::ModelConfig& config, const LagsView& lags,
                        const ModelView& view, uint32_t clusters, uint32_t steps, uint32_t lag,
                        v1::CkTestResponse* resp) {
  const int k = clusters == 0 ? static_cast<int>(config.clusters()) : static_cast<int>(clusters);
  if (k < 1 || k > static_cast<int>(kLagBasisAtoms) * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("field clusters is ", clusters, ", expected 1..", kLagBasisAtoms * 4));
  }
  if (steps == 1) return absl::InvalidArgumentError("field steps is 1, expected >= 2 (or 0 for every multiple)");
  const int base = lag == 0 ? (lags.stats.counts ? lags.stats.counts->lags.front() : 1) : static_cast<int>(lag);
  const int max_steps = steps == 0 ? LaggedMoments::kMaxLag : static_cast<int>(std::min<uint32_t>(steps, 1u << 20));
  absl::StatusOr<CkPair> ck = RunCkTests(lags, CkSetsOf(view), k, max_steps, base, config.seed(), Label(model));
  if (!ck.ok()) {
    return absl::Status(ck.status().code(), absl::StrCat("model '", model, "': CK test: ", ck.status().message()));
  }
  resp->set_estimator(ck->koopman ? "koopman" : "counts");
  Fill(*ck->counts, k, resp->mutable_counts());
  if (ck->koopman) Fill(*ck->koopman, k, resp->mutable_koopman());
  return absl::OkStatus();
}

}  // namespace cmestream::service
