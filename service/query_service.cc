// Read-only queries: each copies the model's latest view pointer and answers from it alone.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "service/rpc_util.h"
#include "service/services.h"

namespace cmestream::service {
namespace {

constexpr double kDefaultRefreshTimeoutSeconds = 60;
constexpr double kMaxRefreshTimeoutSeconds = 3600;
constexpr uint32_t kDefaultTop = 6;

absl::Status NoViewYet(const Model& model) {
  const Model::Stats s = model.stats();
  std::string state = s.learner_ready
                          ? absl::StrCat("it has ", s.samples, " samples")
                          : absl::StrCat("it is still choosing sigma (", s.pending_warmup, " of ",
                                         model.config().auto_sigma_warmup(), " warm-up pairs buffered)");
  return absl::FailedPreconditionError(absl::StrCat(
      "model '", model.name(), "' has no view yet: ", state, "; call Refresh (wait=true) or wait for the refresh every ",
      model.config().refresh_interval_seconds(), " s"));
}

// The latest view with its CME part, or FailedPrecondition.
absl::StatusOr<std::shared_ptr<const ModelView>> RequireView(const Model& model) {
  std::shared_ptr<const ModelView> view = model.view();
  if (!view || !view->cme) return NoViewYet(model);
  return view;
}

// Query points: a multiple of the model's dimension, finite. Returns the number of points.
absl::StatusOr<int64_t> CheckPoints(const google::protobuf::RepeatedField<double>& points, const Model& model) {
  const int d = model.dim();
  if (points.size() % d != 0) {
    return absl::InvalidArgumentError(absl::StrCat("field points has ", points.size(),
                                                   " values, expected a multiple of dim ", d, " of model '",
                                                   model.name(), "'"));
  }
  for (int i = 0; i < points.size(); ++i) {
    if (!std::isfinite(points.Get(i))) {
      return absl::InvalidArgumentError(absl::StrCat("field points value ", i, " (point ", i / d, ", component ",
                                                     i % d, ") is ", points.Get(i), ", expected a finite number"));
    }
  }
  return points.size() / d;
}

Eigen::Map<const RowMatrixXd> AsRows(const google::protobuf::RepeatedField<double>& v, int64_t n, int d) {
  return Eigen::Map<const RowMatrixXd>(v.data(), n, d);
}

void SetComplex(v1::Complex* out, std::complex<double> z) {
  out->set_re(z.real());
  out->set_im(z.imag());
}

}  // namespace

grpc::ServerUnaryReactor* QueryServiceImpl::Refresh(grpc::CallbackServerContext* ctx, const v1::RefreshRequest* req,
                                                    v1::RefreshResponse* resp) {
  auto call = std::make_shared<UnaryCall>(ctx, metrics_, "Refresh");
  absl::StatusOr<std::shared_ptr<Model>> found = registry_.Get(req->model());
  if (!found.ok()) return call->Finish(found.status());
  std::shared_ptr<Model> model = *std::move(found);
  double timeout = req->timeout_seconds() == 0 ? kDefaultRefreshTimeoutSeconds : req->timeout_seconds();
  if (!std::isfinite(timeout) || timeout < 0 || timeout > kMaxRefreshTimeoutSeconds) {
    return call->Finish(absl::InvalidArgumentError(absl::StrCat("field timeout_seconds is ", req->timeout_seconds(),
                                                                 ", expected 0 (default ", kDefaultRefreshTimeoutSeconds,
                                                                 ") to ", kMaxRefreshTimeoutSeconds)));
  }
  if (!req->wait()) {
    scheduler_.Request(*model);
    if (auto view = model->view()) *resp->mutable_view() = view->Info();
    return call->Finish(absl::OkStatus());
  }
  const Model::Stats stats = model->stats();
  if (!stats.learner_ready || stats.samples == 0) {
    return call->Finish(absl::FailedPreconditionError(
        !stats.learner_ready
            ? absl::StrCat("model '", model->name(), "' cannot build a view yet: it is still choosing sigma (",
                           stats.pending_warmup, " of ", model->config().auto_sigma_warmup(),
                           " warm-up pairs buffered); ingest more pairs first")
            : absl::StrCat("model '", model->name(), "' has no samples yet; ingest pairs before refreshing")));
  }
  // Wait no longer than the client does.
  auto deadline = RefreshScheduler::Clock::now() +
                  std::chrono::duration_cast<RefreshScheduler::Clock::duration>(std::chrono::duration<double>(timeout));
  const auto client_left = ctx->deadline() - std::chrono::system_clock::now();
  if (client_left < std::chrono::hours(24 * 365)) deadline = std::min(deadline, RefreshScheduler::Clock::now() + client_left);
  scheduler_.Wait(model, stats.samples, deadline,
                  [call, resp](absl::StatusOr<std::shared_ptr<const ModelView>> view) {
                    if (view.ok()) *resp->mutable_view() = (*view)->Info();
                    call->Finish(view.status());
                  });
  return call->reactor();
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetKoopman(grpc::CallbackServerContext* ctx, const v1::KoopmanRequest* req,
                                                       v1::KoopmanResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetKoopman");
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Get(req->model());
  if (!model.ok()) return call.Finish(model.status());
  const uint32_t top = req->top() == 0 ? kDefaultTop : req->top();
  if (top > static_cast<uint32_t>(kStoredEigenpairs)) {
    return call.Finish(absl::InvalidArgumentError(
        absl::StrCat("field top is ", req->top(), ", expected 0 (default ", kDefaultTop, ") to ", kStoredEigenpairs)));
  }
  absl::StatusOr<int64_t> n = CheckPoints(req->points(), **model);
  if (!n.ok()) return call.Finish(n.status());
  absl::StatusOr<std::shared_ptr<const ModelView>> view = RequireView(**model);
  if (!view.ok()) return call.Finish(view.status());

  const KoopmanDecomposition& k = (*view)->cme->koopman;
  const int count = std::min<int>(static_cast<int>(top), static_cast<int>(k.eigenvalues.size()));
  *resp->mutable_view() = (*view)->Info();
  resp->set_dt(k.dt);
  for (int l = 0; l < count; ++l) {
    SetComplex(resp->add_eigenvalues(), k.eigenvalues(l));
    SetComplex(resp->add_rates(), k.rates(l));
    resp->add_timescales(k.timescales(l));
  }
  if (*n > 0 && count > 0) {
    const MatrixXcd values = k.Evaluate(AsRows(req->points(), *n, (*model)->dim()));  // n x K
    for (int l = 0; l < count; ++l) {
      v1::Eigenfunction* f = resp->add_eigenfunctions();
      f->mutable_values()->Reserve(static_cast<int>(*n));
      for (int64_t i = 0; i < *n; ++i) SetComplex(f->add_values(), values(i, l));
    }
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::Predict(grpc::CallbackServerContext* ctx, const v1::PredictRequest* req,
                                                    v1::PredictResponse* resp) {
  UnaryCall call(ctx, metrics_, "Predict");
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Get(req->model());
  if (!model.ok()) return call.Finish(model.status());
  absl::StatusOr<int64_t> n = CheckPoints(req->points(), **model);
  if (!n.ok()) return call.Finish(n.status());
  absl::StatusOr<std::shared_ptr<const ModelView>> view = RequireView(**model);
  if (!view.ok()) return call.Finish(view.status());

  const int d = (*model)->dim();
  *resp->mutable_view() = (*view)->Info();
  resp->set_dim(static_cast<uint32_t>(d));
  if (*n > 0) {
    const RowMatrixXd pred = PredictConditionalMean((*view)->cme->snapshot, AsRows(req->points(), *n, d));
    resp->mutable_predictions()->Add(pred.data(), pred.data() + pred.size());
  }
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* QueryServiceImpl::GetDictionary(grpc::CallbackServerContext* ctx,
                                                          const v1::DictionaryRequest* req, v1::DictionaryResponse* resp) {
  UnaryCall call(ctx, metrics_, "GetDictionary");
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Get(req->model());
  if (!model.ok()) return call.Finish(model.status());
  absl::StatusOr<std::shared_ptr<const ModelView>> view = RequireView(**model);
  if (!view.ok()) return call.Finish(view.status());
  const CmeSnapshot& s = (*view)->cme->snapshot;
  *resp->mutable_view() = (*view)->Info();
  resp->set_dim((*model)->config().dim());
  resp->set_sigma(s.sigma);
  resp->mutable_x_atoms()->Add(s.x_atoms.data(), s.x_atoms.data() + s.x_atoms.size());
  resp->mutable_y_atoms()->Add(s.y_atoms.data(), s.y_atoms.data() + s.y_atoms.size());
  return call.Finish(absl::OkStatus());
}

}  // namespace cmestream::service
