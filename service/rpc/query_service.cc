// Read-only queries: each copies the model's latest view pointer and answers from it alone.
#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/spectral/spectral_summary.h"
#include "service/engine/fit_summary.h"
#include "service/engine/lags.h"
#include "service/rpc/rpc_util.h"
#include "service/rpc/services.h"

namespace cmestream::service {
namespace {

constexpr double kDefaultRefreshTimeoutSeconds = 60;
constexpr double kMaxRefreshTimeoutSeconds = 3600;
constexpr uint32_t kDefaultTop = 6;
constexpr uint32_t kMaxHorizon = 1000;

absl::Status NoViewYet(const Model& model) {
  if (model.failed()) return model.Failed();  // a failed model drops its view
  const Model::Stats s = model.stats();
  if (model.awaiting_view() && s.learner_ready && s.samples > 0) {
    // Restored evicted at the daemon's start (Model's RESTART): the scheduler loads it back and
    // builds its view (it may be loaded back already, its view not built yet).
    model.refresh_requested = true;
    return absl::UnavailableError(absl::StrCat("model '", model.name(),
                                               "' has no view yet: it was evicted when the daemon restarted and is "
                                               "being loaded back to build one; retry shortly, or call Refresh "
                                               "(wait=true)"));
  }
  std::string state = s.learner_ready ? absl::StrCat("it has ", s.samples, " samples")
                                      : absl::StrCat("it is still choosing sigma (", s.pending_warmup, " of ",
                                                     model.config().auto_sigma_warmup(), " warm-up pairs buffered)");
  return absl::FailedPreconditionError(absl::StrCat("model '", model.name(), "' has no view yet: ", state,
                                                    "; call Refresh (wait=true) or wait for the refresh every ",
                                                    model.config().refresh_interval_seconds(), " s"));
}

// A query's working set grows with its points times the model's width (kernel rows, feature
// rows, reply messages): bounded per request by --max-query-mb, so one read-only call cannot
// take the daemon's memory. `per_point_bytes` is the handler's estimate for one point.
absl::Status CheckQueryCost(const Model& model, int64_t points, double per_point_bytes, const LimitOptions& limits) {
  const double bytes = static_cast<double>(points) * per_point_bytes;
  const double budget = limits.max_query_mb * 1024 * 1024;
  if (bytes <= budget) return absl::OkStatus();
  const int64_t fit = static_cast<int64_t>(budget / per_point_bytes);
  return absl::ResourceExhaustedError(absl::StrCat(
      "query of model '", model.name(), "' with ", points, " points would need about ",
      static_cast<int64_t>(bytes / (1024 * 1024)), " MiB, more than this daemon allows per query (--max-query-mb ",
      limits.max_query_mb, "); send at most ", fit, " points per call"));
}

// Width of a model's per-point work: dictionary atoms (continuous) and RFF features.
double ModelWidth(const Model& model) {
  const Model::Stats s = model.stats();
  return static_cast<double>(std::max<int64_t>({s.dict_x, s.dict_y, static_cast<int64_t>(model.config().rff_features()),
                                                static_cast<int64_t>(model.config().num_states()), 1}));
}

// The latest view with its CME part, or FailedPrecondition.
absl::StatusOr<std::shared_ptr<const ModelView>> RequireView(const Model& model) {
  if (model.failed()) return model.Failed();
  if (model.discrete()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model.name(), "' is discrete (num_states ", model.config().num_states(),
        "): it has no kernel CME; GetKoopman, Predict and GetDictionary serve continuous models (dim >= 1)"));
  }
  model.Touch();  // a view query: the model is in use (its eviction waits)
  std::shared_ptr<const ModelView> view = model.view();
  if (!view || !view->cme) return NoViewYet(model);
  return view;
}

// Continuous query values in `field`: a multiple of the model's dimension, finite. Returns the
// number of points.
absl::StatusOr<int64_t> CheckContinuousPoints(const google::protobuf::RepeatedField<double>& points, const Model& model,
                                              absl::string_view field) {
  const int d = model.dim();
  if (points.size() % d != 0) {
    return absl::InvalidArgumentError(absl::StrCat("field ", field, " has ", points.size(),
                                                   " values, expected a multiple of dim ", d, " of model '",
                                                   model.name(), "'"));
  }
  for (int i = 0; i < points.size(); ++i) {
    if (!std::isfinite(points.Get(i))) {
      return absl::InvalidArgumentError(absl::StrCat("field ", field, " value ", i, " (point ", i / d, ", component ",
                                                     i % d, ") is ", points.Get(i), ", expected a finite number"));
    }
  }
  return points.size() / d;
}

// The states the estimators learn on from n raw rows of `v` (user's units): the rows
// themselves, or for a model with delays the n - span + 1 windows ending at rows span-1..n-1
// (docs/algorithms.md §1.14). A field with rows but not one complete window is refused.
absl::StatusOr<RowMatrixXd> StateRows(const Model& model, const google::protobuf::RepeatedField<double>& v, int64_t n,
                                      absl::string_view field) {
  const int d = model.dim();
  const std::optional<DelayEmbedding::Options> delay = DelayOptionsFor(model.config());
  if (!delay) return RowMatrixXd(Eigen::Map<const RowMatrixXd>(v.data(), n, d));
  const DelayEmbedding::Options& o = *delay;
  if (n > 0 && n < o.span()) {
    return absl::InvalidArgumentError(absl::StrCat("field ", field, " has ", n, " rows, expected at least ", o.span(),
                                                   " (one complete window: model '", model.name(), "' has delays ",
                                                   o.delays, ", stride ", o.stride, "), raw rows oldest first"));
  }
  RowMatrixXd windows(DelayEmbedding::NumWindows(o, n), o.window_dim());
  DelayEmbedding::WindowsOf(o, v.data(), n, windows.data());
  return windows;
}

// Query points of the CME queries (continuous models only). Returns the number of points.
absl::StatusOr<int64_t> CheckPoints(const google::protobuf::RepeatedField<double>& points, const Model& model) {
  if (model.discrete()) return RequireView(model).status();  // the CME queries' refusal, not a dim of 0
  return CheckContinuousPoints(points, model, "points");
}

// The latest view (any model kind), or FailedPrecondition.
absl::StatusOr<std::shared_ptr<const ModelView>> AnyView(const Model& model) {
  model.Touch();  // a view query: the model is in use (its eviction waits)
  std::shared_ptr<const ModelView> view = model.view();
  if (!view) return NoViewYet(model);
  return view;
}

// The value of a sub-view, or FailedPrecondition with the reason kept at refresh.
template <class T>
absl::StatusOr<std::shared_ptr<const T>> Require(const Model& model, const SubView<T>& sub, absl::string_view what) {
  if (sub.value) return sub.value;
  return absl::FailedPreconditionError(
      absl::StrCat("model '", model.name(), "': ", what, " not available: ", sub.error));
}

// Query points of either kind as rows: continuous `points` (n*d doubles, finite) or discrete
// `ids` (ids in [0, P), as n x 1 doubles). The field of the other kind must be empty.
absl::StatusOr<RowMatrixXd> QueryRows(const google::protobuf::RepeatedField<double>& points,
                                      const google::protobuf::RepeatedField<int64_t>& ids, const Model& model,
                                      absl::string_view points_field = "points",
                                      absl::string_view ids_field = "state_ids") {
  if (model.discrete()) {
    const uint32_t p = model.config().num_states();
    if (!points.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("field ", points_field, " has ", points.size(),
                                                     " values, expected none: model '", model.name(),
                                                     "' is discrete; send ", ids_field, " in [0, ", p, ")"));
    }
    RowMatrixXd rows(ids.size(), 1);
    for (int i = 0; i < ids.size(); ++i) {
      if (ids.Get(i) < 0 || ids.Get(i) >= static_cast<int64_t>(p)) {
        return absl::InvalidArgumentError(absl::StrCat("field ", ids_field, " value ", i, " is ", ids.Get(i),
                                                       ", expected a state id in [0, ", p, ") of model '", model.name(),
                                                       "'"));
      }
      rows(i, 0) = static_cast<double>(ids.Get(i));
    }
    return rows;
  }
  if (!ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("field ", ids_field, " has ", ids.size(),
                                                   " values, expected none: model '", model.name(),
                                                   "' is continuous (dim ", model.dim(), "); send ", points_field));
  }
  absl::StatusOr<int64_t> n = CheckContinuousPoints(points, model, points_field);
  if (!n.ok()) return n.status();
  return StateRows(model, points, *n, points_field);
}

// What every view query begins with, in this order: authorize, the model's owner (a sharded
// daemon redirects), the model, the query points when the request has a points field (parsed
// and cost-checked at `bytes_per_point`), the latest view and its sub-view `what`. A failed step
// is the status the call finishes with.
template <class T>
struct ViewQuery {
  std::shared_ptr<Model> model;
  std::shared_ptr<const ModelView> view;
  std::shared_ptr<const T> sub;
  RowMatrixXd points;  // 0 rows when the request has no points field
};

struct QueryPoints {
  const google::protobuf::RepeatedField<double>* points = nullptr;  // null: no points field
  const google::protobuf::RepeatedField<int64_t>* ids = nullptr;
  double bytes_per_point = 0;  // reply bytes per point, for CheckQueryCost (times ModelWidth)
};

template <class T>
absl::StatusOr<ViewQuery<T>> StartViewQuery(const UnaryCall& call, const TokenAuthenticator* auth,
                                            const Ownership* ownership, ModelRegistry& registry,
                                            const std::string& name, SubView<T> LearnerView::*sub,
                                            absl::string_view what, const QueryPoints& points = {}) {
  ViewQuery<T> q;
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth, ownership, registry, name);
  if (!model.ok()) return model.status();
  q.model = *std::move(model);
  if (points.points != nullptr) {
    absl::StatusOr<RowMatrixXd> rows = QueryRows(*points.points, *points.ids, *q.model);
    if (!rows.ok()) return rows.status();
    q.points = *std::move(rows);
    const double per_point = points.bytes_per_point * ModelWidth(*q.model);
    if (absl::Status s = CheckQueryCost(*q.model, q.points.rows(), per_point, registry.limits()); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<const ModelView>> view = AnyView(*q.model);
  if (!view.ok()) return view.status();
  q.view = *std::move(view);
  if (q.view->input && !q.model->discrete()) q.points = q.view->input->Apply(std::move(q.points));
  absl::StatusOr<std::shared_ptr<const T>> value = Require(*q.model, (*q.view).*sub, what);
  if (!value.ok()) return value.status();
  q.sub = *std::move(value);
  return q;
}

// Appends a matrix in row-major order.
template <class M>
void AddRowMajor(const M& m, google::protobuf::RepeatedField<double>* out) {
  out->Reserve(out->size() + static_cast<int>(m.size()));
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) out->Add(m(i, j));
  }
}

template <class V>
void AddAll(const V& v, google::protobuf::RepeatedField<double>* out) {
  for (int64_t i = 0; i < v.size(); ++i) out->Add(v(i));
}

// Query states as the view's estimators take them: through the model's input stage (scaled,
// and reduced with reduce K).
RowMatrixXd Scaled(const ModelView& view, RowMatrixXd rows) {
  return view.input ? view.input->Apply(std::move(rows)) : rows;
}

// State-space rows of the view (atoms, predictions) in the user's units.
void AddUnscaled(const ModelView& view, RowMatrixXd rows, google::protobuf::RepeatedField<double>* out) {
  if (view.input) rows = view.input->Invert(std::move(rows));
  out->Add(rows.data(), rows.data() + rows.size());
}

void SetComplex(v1::Complex* out, std::complex<double> z) {
  out->set_re(z.real());
  out->set_im(z.imag());
}

}  // namespace

grpc::ServerUnaryReactor* QueryServiceImpl::Refresh(grpc::CallbackServerContext* ctx, const v1::RefreshRequest* req,
                                                    v1::RefreshResponse* resp) {
  auto call = std::make_shared<UnaryCall>(ctx, metrics_, "Refresh");
  absl::StatusOr<std::shared_ptr<Model>> found = call->FindModel(auth_, ownership_, registry_, req->model());
  if (!found.ok()) return call->Finish(found.status());
  std::shared_ptr<Model> model = *std::move(found);
  if (model->failed()) return call->Finish(model->Failed());
  double timeout = req->timeout_seconds() == 0 ? kDefaultRefreshTimeoutSeconds : req->timeout_seconds();
  if (!std::isfinite(timeout) || timeout < 0 || timeout > kMaxRefreshTimeoutSeconds) {
    return call->Finish(absl::InvalidArgumentError(absl::StrCat("field timeout_seconds is ", req->timeout_seconds(),
                                                                ", expected 0 (default ", kDefaultRefreshTimeoutSeconds,
                                                                ") to ", kMaxRefreshTimeoutSeconds)));
  }
  // An explicit refresh ends a warm-up that holds enough pairs (a short stream may never fill
  // it); the scheduler's timer never does, so the learner's state stays a function of the log.
  if (const Model::Stats before = model->stats();
      !before.learner_ready && before.pending_warmup >= static_cast<uint64_t>(StreamingLearner::kMinEarlyWarmup)) {
    if (absl::Status s = model->EndWarmup(); !s.ok() && !absl::IsFailedPrecondition(s)) return call->Finish(s);
  }
  if (!req->wait()) {
    scheduler_.Request(model);
    if (auto view = model->view()) *resp->mutable_view() = view->Info();
    return call->Finish(absl::OkStatus());
  }
  const Model::Stats stats = model->stats();
  if (!stats.learner_ready || stats.samples == 0) {
    return call->Finish(absl::FailedPreconditionError(
        !stats.learner_ready
            ? absl::StrCat("model '", model->name(), "' cannot build a view yet: it is still choosing sigma (",
                           stats.pending_warmup, " of ", model->config().auto_sigma_warmup(),
                           " warm-up pairs buffered; a refresh ends the warm-up from ",
                           StreamingLearner::kMinEarlyWarmup, " pairs on); ingest more pairs first")
            : absl::StrCat("model '", model->name(), "' has no samples yet; ingest pairs before refreshing")));
  }
  // Wait no longer than the client does.
  auto deadline = RefreshScheduler::Clock::now() +
                  std::chrono::duration_cast<RefreshScheduler::Clock::duration>(std::chrono::duration<double>(timeout));
  const auto client_left = ctx->deadline() - std::chrono::system_clock::now();
  if (client_left < std::chrono::hours(24 * 365))
    deadline = std::min(deadline, RefreshScheduler::Clock::now() + client_left);
  scheduler_.Wait(model, stats.progress, deadline, [call, resp](absl::StatusOr<std::shared_ptr<const ModelView>> view) {
    if (view.ok()) *resp->mutable_view() = (*view)->Info();
    call->Finish(view.status());
  });
  return call->reactor();
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetKoopman(grpc::CallbackServerContext* ctx, const v1::KoopmanRequest* req,
                                                       v1::KoopmanResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetKoopman");
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth_, ownership_, registry_, req->model());
  if (!model.ok()) return call.Finish(model.status());
  const uint32_t top = req->top() == 0 ? kDefaultTop : req->top();
  if (top > static_cast<uint32_t>(kStoredEigenpairs)) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("field top is ", req->top(), ", expected 0 (default ", kDefaultTop, ") to ", kStoredEigenpairs)));
  }
  absl::StatusOr<int64_t> n = CheckPoints(req->points(), **model);
  if (!n.ok()) return call.Finish(n.status());
  // Kernel row, complex values and one reply message per eigenfunction value.
  if (absl::Status s = CheckQueryCost(**model, *n, 16 * ModelWidth(**model) + 96.0 * top, registry_.limits());
      !s.ok()) {
    return call.Finish(s);
  }
  absl::StatusOr<std::shared_ptr<const ModelView>> view = RequireView(**model);
  if (!view.ok()) return call.Finish(view.status());

  const CmeView& cme = *(*view)->cme;
  const KoopmanDecomposition& k = cme.koopman;
  const int count = std::min<int>(static_cast<int>(top), static_cast<int>(k.eigenvalues.size()));
  *resp->mutable_view() = (*view)->Info();
  resp->set_dt(k.dt);
  for (int l = 0; l < count; ++l) {
    SetComplex(resp->add_eigenvalues(), k.eigenvalues(l));
    SetComplex(resp->add_rates(), k.rates(l));
    resp->add_timescales(k.timescales(l));
    resp->add_stationary(l == k.stationary_index);
    resp->add_excess(l < cme.excess.size() ? cme.excess(l) : 0.0);
  }
  const VectorXd periods = KoopmanPeriods(k.eigenvalues.head(count), k.dt);
  for (int l = 0; l < count; ++l) resp->add_periods(periods[l]);
  for (int l = 0; l < count; ++l) {
    const bool have = l < cme.amplitudes.share.size();
    resp->add_amplitudes(have ? cme.amplitudes.amplitude[l] : 0.0);
    resp->add_shares(have ? cme.amplitudes.share[l] : 0.0);
  }
  *resp->mutable_spectrum() = ToSpectrumInfo(cme.spectrum, (*view)->heldout);
  *resp->mutable_headline() = ToHeadline(cme.headline);
  absl::StatusOr<RowMatrixXd> states = StateRows(**model, req->points(), *n, "points");
  if (!states.ok()) return call.Finish(states.status());
  if (states->rows() > 0 && count > 0) {
    const MatrixXcd values = k.Evaluate(Scaled(**view, *std::move(states)));  // states x K
    for (int l = 0; l < count; ++l) {
      v1::Eigenfunction* f = resp->add_eigenfunctions();
      f->mutable_values()->Reserve(static_cast<int>(values.rows()));
      for (int64_t i = 0; i < values.rows(); ++i) SetComplex(f->add_values(), values(i, l));
    }
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::Predict(grpc::CallbackServerContext* ctx, const v1::PredictRequest* req,
                                                    v1::PredictResponse* resp) {
  UnaryCall call(ctx, metrics_, "Predict");
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth_, ownership_, registry_, req->model());
  if (!model.ok()) return call.Finish(model.status());
  absl::StatusOr<int64_t> n = CheckPoints(req->points(), **model);
  if (!n.ok()) return call.Finish(n.status());
  if (absl::Status s =
          CheckQueryCost(**model, *n, 16 * ModelWidth(**model) + 16.0 * (*model)->state_dim(), registry_.limits());
      !s.ok()) {
    return call.Finish(s);
  }
  absl::StatusOr<std::shared_ptr<const ModelView>> view = RequireView(**model);
  if (!view.ok()) return call.Finish(view.status());

  absl::StatusOr<RowMatrixXd> states = StateRows(**model, req->points(), *n, "points");
  if (!states.ok()) return call.Finish(states.status());
  *resp->mutable_view() = (*view)->Info();
  resp->set_dim(static_cast<uint32_t>((*model)->state_dim()));  // predictions are states (windows)
  if (states->rows() > 0) {
    AddUnscaled(**view, PredictConditionalMean((*view)->cme->snapshot, Scaled(**view, *std::move(states))),
                resp->mutable_predictions());
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetDictionary(grpc::CallbackServerContext* ctx,
                                                          const v1::DictionaryRequest* req,
                                                          v1::DictionaryResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetDictionary");
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth_, ownership_, registry_, req->model());
  if (!model.ok()) return call.Finish(model.status());
  absl::StatusOr<std::shared_ptr<const ModelView>> view = RequireView(**model);
  if (!view.ok()) return call.Finish(view.status());
  const CmeSnapshot& s = (*view)->cme->snapshot;
  *resp->mutable_view() = (*view)->Info();
  resp->set_dim(static_cast<uint32_t>((*model)->state_dim()));  // atoms are states (windows)
  resp->set_sigma(s.sigma);
  AddUnscaled(**view, s.x_atoms, resp->mutable_x_atoms());
  AddUnscaled(**view, s.y_atoms, resp->mutable_y_atoms());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetCounts(grpc::CallbackServerContext* ctx, const v1::CountsRequest* req,
                                                      v1::CountsResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetCounts");
  absl::StatusOr<ViewQuery<CountsView>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::counts, "counts");
  if (!q.ok()) return call.Finish(q.status());
  const CountsSnapshot& counts = q->sub->counts;
  *resp->mutable_view() = q->view->Info();
  resp->set_num_states(static_cast<uint32_t>(counts.num_states()));
  for (const CountTriplet& t : counts.Triplets()) {
    v1::CountEntry* e = resp->add_counts();
    e->set_from(static_cast<uint32_t>(t.i));
    e->set_to(static_cast<uint32_t>(t.j));
    e->set_count(t.value);
  }
  AddAll(counts.visits(), resp->mutable_visits());
  AddAll(counts.Stationary(), resp->mutable_stationary());
  resp->set_dim(q->model->discrete() ? 0 : static_cast<uint32_t>(q->model->state_dim()));
  AddRowMajor(q->sub->coordinates, resp->mutable_state_coordinates());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetEmbedding(grpc::CallbackServerContext* ctx,
                                                         const v1::EmbeddingRequest* req, v1::EmbeddingResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetEmbedding");
  absl::StatusOr<ViewQuery<StateEmbedding>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::embedding, "embedding",
                     {&req->points(), &req->state_ids(), 24});
  if (!q.ok()) return call.Finish(q.status());
  *resp->mutable_view() = q->view->Info();
  resp->set_rank(static_cast<uint32_t>(q->sub->rank()));
  if (q->points.rows() > 0) AddRowMajor(q->sub->Embed(q->points), resp->mutable_embedding());
  AddAll(q->sub->singular_values(), resp->mutable_singular_values());
  AddAll(q->sub->SingularValueGaps(), resp->mutable_singular_value_gaps());
  *resp->mutable_summary() = ToFitSummary(q->sub->summary());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetClusters(grpc::CallbackServerContext* ctx,
                                                        const v1::ClustersRequest* req, v1::ClustersResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetClusters");
  absl::StatusOr<ViewQuery<ClustersView>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::clusters, "clusters",
                     {&req->points(), &req->state_ids(), 24});
  if (!q.ok()) return call.Finish(q.status());
  const ClustersView& cv = *q->sub;
  *resp->mutable_view() = q->view->Info();
  const int k = cv.clusters.num_clusters();
  resp->set_clusters(static_cast<uint32_t>(k));
  for (size_t i = 0; i < cv.ids.size(); ++i) {
    v1::Representative* r = resp->add_representatives();
    if (cv.coordinates.rows() > 0) {
      for (int64_t j = 0; j < cv.coordinates.cols(); ++j)
        r->add_coordinates(cv.coordinates(static_cast<int64_t>(i), j));
    }
    r->set_id(cv.ids[i]);
    r->set_weight(cv.weights(static_cast<int64_t>(i)));
    r->set_label(static_cast<uint32_t>(cv.labels(static_cast<int64_t>(i))));
  }
  if (q->points.rows() > 0) {
    // The clusters were built from this view's embedding (same ModelView).
    const Eigen::VectorXi labels = cv.clusters.Label(*q->view->embedding.value, q->points);
    for (int64_t i = 0; i < labels.size(); ++i) resp->add_point_labels(static_cast<uint32_t>(labels(i)));
  }
  AddRowMajor(cv.coarse.transition, resp->mutable_transition_matrix());
  AddAll(cv.coarse.masses, resp->mutable_masses());
  AddAll(cv.timescales, resp->mutable_timescales());
  resp->set_inertia(cv.clusters.kmeans().inertia);
  *resp->mutable_summary() = ToFitSummary(cv.clusters.kmeans());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetAggregation(grpc::CallbackServerContext* ctx,
                                                           const v1::AggregationRequest* req,
                                                           v1::AggregationResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetAggregation");
  absl::StatusOr<ViewQuery<AggregationView>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::aggregation, "aggregation");
  if (!q.ok()) return call.Finish(q.status());
  const AggregationResult& r = q->sub->result;
  *resp->mutable_view() = q->view->Info();
  resp->set_meta_states(static_cast<uint32_t>(r.V.cols()));
  for (int s : r.states) resp->add_state_ids(s);
  resp->set_dim(q->model->discrete() ? 0 : static_cast<uint32_t>(q->model->state_dim()));
  AddRowMajor(q->sub->coordinates, resp->mutable_state_coordinates());
  AddRowMajor(r.V, resp->mutable_v());
  AddRowMajor(r.U, resp->mutable_u());
  for (const std::vector<int>& rows : r.anchors) {
    v1::IndexList* list = resp->add_anchors();
    for (int i : rows) list->add_indices(static_cast<uint32_t>(i));
  }
  for (int k : r.partition) resp->add_partition(static_cast<uint32_t>(k));
  for (int s : r.excluded_states) resp->add_excluded(s);
  resp->set_distance_to_empirical(r.mean_row_tv_to_empirical);
  *resp->mutable_summary() = ToFitSummary(r);
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetLatent(grpc::CallbackServerContext* ctx, const v1::LatentRequest* req,
                                                      v1::LatentResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetLatent");
  absl::StatusOr<ViewQuery<LatentModel>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::latent, "latent model",
                     {&req->points(), &req->state_ids(), 24});
  if (!q.ok()) return call.Finish(q.status());
  *resp->mutable_view() = q->view->Info();
  resp->set_latent_states(static_cast<uint32_t>(q->sub->k()));
  AddAll(q->sub->weights(), resp->mutable_weights());
  *resp->mutable_summary() = ToFitSummary(q->sub->summary());
  if (q->points.rows() > 0) {
    absl::StatusOr<MatrixXd> density = q->sub->Density(q->points);  // n x k
    if (!density.ok()) return call.Finish(density.status());
    AddRowMajor(density->transpose(), resp->mutable_densities());  // [h*n + i]
    absl::StatusOr<MatrixXd> posterior = q->sub->Posterior(q->points);
    if (!posterior.ok()) return call.Finish(posterior.status());
    AddRowMajor(*posterior, resp->mutable_posteriors());
  }
  return call.Finish(absl::OkStatus());
}

namespace {

void SetSkill(const ForecastSkill& skill, v1::ForecastSkill* out) {
  out->set_rmse(skill.rmse());
  out->set_rmse_persistence(skill.rmse_persistence());
  out->set_ratio(skill.ratio());
  out->set_pairs(static_cast<uint64_t>(skill.pairs));
}

void SetHorizonSkill(const ForecastView& f, v1::ForecastResponse* resp) {
  const int sd = f.skill.scored_dims;
  for (size_t i = 0; i < f.horizons.size(); ++i) {
    const ForecastHorizonSkill& s = f.horizons[i];
    v1::ForecastHorizonSkill* out = resp->add_horizon_skill();
    out->set_horizon(static_cast<uint32_t>(i + 1));
    out->set_pairs(static_cast<uint64_t>(s.pairs));
    out->set_rmse_regression(s.rmse(ForecastMethod::kRegression, sd));
    out->set_rmse_linear(s.rmse(ForecastMethod::kLinear, sd));
    out->set_rmse_persistence(s.rmse(ForecastMethod::kPersistence, sd));
    out->set_method(ForecastMethodName(f.MethodAt(static_cast<int>(i + 1))));
  }
}

// The regression's forecasts of raw rows: the states of `path` (H x state_dim, scaled) in the
// user's units, each reduced to its newest row (the last dim values of a window; all of a state
// without delays).
void AddNewestRows(const Model& model, const ModelView& view, RowMatrixXd path,
                   google::protobuf::RepeatedField<double>* out) {
  if (view.input) path = view.input->Invert(std::move(path));
  const int d = model.dim();
  for (int64_t h = 0; h < path.rows(); ++h)
    out->Add(path.row(h).data() + path.cols() - d, path.row(h).data() + path.cols());
}

// Rolling forecasts over `series` (raw rows, oldest first; not learned): for each row r from the
// first complete state on (row start = span - 1 with delays, else 0), the forecasts of rows
// r+1..r+H from the regression's one-step map iterated.
absl::Status FillSeriesForecast(const Model& model, const ModelView& view, const ForecastView& f,
                                const google::protobuf::RepeatedField<double>& series, uint32_t horizon,
                                const LimitOptions& limits, v1::ForecastResponse* resp) {
  absl::StatusOr<int64_t> n = CheckContinuousPoints(series, model, "series");
  if (!n.ok()) return n.status();
  const int d = model.dim();
  // Per row: the features (8 N bytes of scratch), an H-step path of states and H*d doubles of reply.
  if (absl::Status s =
          CheckQueryCost(model, *n, 8.0 * horizon * (d + model.state_dim()) + 8.0 * f.model.num_features(), limits);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<RowMatrixXd> states = StateRows(model, series, *n, "series");
  if (!states.ok()) return states.status();
  resp->set_start(static_cast<uint64_t>(*n - states->rows()));
  google::protobuf::RepeatedField<double>* out = resp->mutable_series_forecast();
  out->Reserve(static_cast<int>(states->rows() * horizon * d));
  // The regression learned in the scaled units of a scaled model: states in, forecasts back out.
  const RowMatrixXd rows = Scaled(view, *std::move(states));
  for (int64_t r = 0; r < rows.rows(); ++r)
    AddNewestRows(model, view, f.Rollout(rows.row(r).data(), static_cast<int>(horizon)), out);
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* QueryServiceImpl::Forecast(grpc::CallbackServerContext* ctx, const v1::ForecastRequest* req,
                                                     v1::ForecastResponse* resp) {
  UnaryCall call(ctx, metrics_, "Forecast");
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth_, ownership_, registry_, req->model());
  if (!model.ok()) return call.Finish(model.status());
  const uint32_t horizon = req->horizon() == 0 ? 1 : req->horizon();
  if (horizon > kMaxHorizon) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("field horizon is ", req->horizon(), ", expected 0 (default 1) to ", kMaxHorizon)));
  }
  const bool has_window = !req->window().empty() || !req->window_ids().empty();
  if (!req->series().empty() && has_window) {
    return call.Finish(absl::InvalidArgumentError("fields series and window are exclusive: send one of them"));
  }
  if (!req->series().empty() && (*model)->discrete()) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("field series: model '", req->model(), "' is discrete; send window_ids")));
  }
  absl::StatusOr<RowMatrixXd> window = QueryRows(req->window(), req->window_ids(), **model, "window", "window_ids");
  if (!window.ok()) return call.Finish(window.status());
  absl::StatusOr<std::shared_ptr<const ModelView>> view = AnyView(**model);
  if (!view.ok()) return call.Finish(view.status());
  *resp->mutable_view() = (*view)->Info();
  resp->set_horizon(horizon);
  const std::shared_ptr<const ForecastView>& regression = (*view)->forecast.value;
  if (regression) {
    SetSkill(regression->skill, resp->mutable_skill());
    SetHorizonSkill(*regression, resp);
  }
  // Discrete models, and predictive-state models (--window L) given a window: the §6 filter.
  if ((*model)->discrete() || ((*view)->predictive.value && req->series().empty())) {
    absl::StatusOr<std::shared_ptr<const PredictiveStateModel>> m =
        Require(**model, (*view)->predictive, "predictive-state model");
    if (!m.ok()) return call.Finish(m.status());
    absl::StatusOr<PredictiveStateModel::Forecast> f = (*m)->ForecastFrom(*window, static_cast<int>(horizon));
    if (!f.ok()) return call.Finish(f.status());
    resp->set_method("predictive_state");
    resp->set_dim(static_cast<uint32_t>((*m)->obs_dim()));
    AddRowMajor(f->mean, resp->mutable_forecast());
    AddRowMajor(f->distribution, resp->mutable_distribution());
    AddAll(f->state, resp->mutable_state());
    return call.Finish(absl::OkStatus());
  }
  // Continuous models: the regression (docs/algorithms.md §11), from the window's last row.
  absl::StatusOr<std::shared_ptr<const ForecastView>> f = Require(**model, (*view)->forecast, "forecast regression");
  if (!f.ok()) return call.Finish(f.status());
  // Per step, the candidate with the best live skill at that horizon (ForecastView::MethodAt).
  resp->set_method(ForecastMethodName((*f)->MethodAt(1)));
  for (uint32_t h = 1; h <= horizon; ++h)
    resp->add_step_methods(ForecastMethodName((*f)->MethodAt(static_cast<int>(h))));
  resp->set_dim(static_cast<uint32_t>((*model)->dim()));  // forecasts are raw rows
  if (!req->series().empty()) {
    return call.Finish(FillSeriesForecast(**model, **view, **f, req->series(), horizon, registry_.limits(), resp));
  }
  if (window->rows() == 0) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("fields window and series are empty: send the recent observations of model '", req->model(),
                     "' (window, oldest first) or a series to forecast along")));
  }
  const RowMatrixXd last = Scaled(**view, window->bottomRows(1));  // the newest state (window)
  AddNewestRows(**model, **view, (*f)->Rollout(last.data(), static_cast<int>(horizon)), resp->mutable_forecast());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetTimescales(grpc::CallbackServerContext* ctx,
                                                          const v1::TimescalesRequest* req,
                                                          v1::TimescalesResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetTimescales");
  absl::StatusOr<ViewQuery<LagsView>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::lags, "timescales");
  if (!q.ok()) return call.Finish(q.status());
  *resp->mutable_view() = q->view->Info();
  return call.Finish(FillTimescales(req->model(), *q->sub, resp));
}

grpc::ServerUnaryReactor* QueryServiceImpl::CkTest(grpc::CallbackServerContext* ctx, const v1::CkTestRequest* req,
                                                   v1::CkTestResponse* resp) {
  UnaryCall call(ctx, metrics_, "CkTest");
  absl::StatusOr<ViewQuery<LagsView>> q =
      StartViewQuery(call, auth_, ownership_, registry_, req->model(), &ModelView::lags, "CK test");
  if (!q.ok()) return call.Finish(q.status());
  // Cost: (blocks + 1) K^k products of a <= 33 x 33 matrix per lag, plus a k-means over the
  // view's representatives when another number of clusters is asked for (bounded by max_dict).
  *resp->mutable_view() = q->view->Info();
  return call.Finish(
      FillCkTest(req->model(), q->model->config(), *q->sub, *q->view, req->clusters(), req->steps(), req->lag(), resp));
}

}  // namespace cmestream::service
