// ListAlarms and WatchAlarms: the change alarms a model keeps (core/alarms/alarm_monitor.h).
#include <chrono>
#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/alarm.h"
#include "service/rpc/rpc_util.h"
#include "service/rpc/services.h"

namespace cmestream::service {
namespace {

// How often a watch looks for new alarms: an alarm reaches a watcher within this long.
constexpr auto kWatchPoll = std::chrono::milliseconds(200);

v1::Alarm AlarmProto(const std::string& model, const AlarmRecord& r) {
  v1::Alarm a;
  a.set_model(model);
  a.set_index(static_cast<uint64_t>(r.index));
  a.set_time(r.time);
  a.set_score(r.score);
  a.set_threshold(r.threshold);
  for (int c : r.channels) a.add_channels(static_cast<uint32_t>(c));
  a.set_kind(KindName(r.kind));
  a.set_onset(static_cast<uint64_t>(r.onset));
  a.set_direction(DirectionName(r.direction));
  return a;
}

// One WatchAlarms call. Every step runs under mu_; the call is finished exactly once, from the
// poll timer's callback or a failed write, so no callback can run after OnDone deletes it: at
// any time either a write or the poll timer is outstanding (never both), and Finish is called
// only when neither is.
class AlarmWatch final : public grpc::ServerWriteReactor<v1::Alarm> {
 public:
  AlarmWatch(grpc::CallbackServerContext* ctx, Metrics& metrics, const ModelRegistry& registry,
             std::shared_ptr<Model> model, uint64_t since)
      : ctx_(ctx), metrics_(metrics), registry_(registry), model_(std::move(model)), next_(since) {
    absl::MutexLock lock(&mu_);
    PollLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) return FinishLocked(absl::CancelledError("the client went away"));
    next_ = queue_.front().index() + 1;
    queue_.pop_front();
    if (!queue_.empty()) return WriteLocked();
    PollLocked();
  }

  void OnCancel() override {
    bool armed = false;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      armed = timer_armed_;
    }
    // Outside the lock (the timer's callback takes it). Its callback, now or when it fires,
    // finishes the call; OnDone (which deletes this) waits for OnCancel to return.
    if (armed) timer_.Cancel();
  }

  void OnDone() override {
    metrics_.ObserveRpc("WatchAlarms", std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
                        static_cast<int>(status_code_));
    delete this;
  }

 private:
  void PollLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancelled_) return FinishLocked(absl::CancelledError("the watch was cancelled"));
    absl::StatusOr<std::shared_ptr<Model>> current = registry_.Get(model_->name());
    if (!current.ok() || current->get() != model_.get()) {
      return FinishLocked(absl::NotFoundError(absl::StrCat("model '", model_->name(), "' was deleted")));
    }
    // The learner lock only when the alarm count moved (the stats lock is a leaf; the first poll
    // always looks): a watch does not contend with ingestion while nothing happens.
    const uint64_t total = model_->stats().alarms_total;
    if (!polled_ || total != seen_total_) {
      absl::StatusOr<Model::AlarmList> list = model_->Alarms(next_);
      if (!list.ok()) return FinishLocked(list.status());
      polled_ = true;
      seen_total_ = total;
      for (const AlarmRecord& r : list->alarms) queue_.push_back(AlarmProto(model_->name(), r));
      if (!queue_.empty()) return WriteLocked();
    }
    timer_armed_ = true;
    timer_.Set(std::chrono::system_clock::now() + kWatchPoll, [this](bool fired) { OnTimer(fired); });
  }

  void OnTimer(bool fired) {
    absl::MutexLock lock(&mu_);
    timer_armed_ = false;
    if (!fired || cancelled_) return FinishLocked(absl::CancelledError("the watch was cancelled"));
    PollLocked();
  }

  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    StartWrite(&queue_.front());
  }

  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    status_code_ = status.code();
    AddRetryTrailer(status, ctx_);
    Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* ctx_;
  Metrics& metrics_;
  const ModelRegistry& registry_;
  const std::shared_ptr<Model> model_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::Alarm> queue_ ABSL_GUARDED_BY(mu_);  // front: being written
  bool polled_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t seen_total_ ABSL_GUARDED_BY(mu_) = 0;  // the model's alarm count at the last look
  grpc::Alarm timer_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool timer_armed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusCode status_code_ = absl::StatusCode::kOk;
};

// A call refused before it started: finishes at once.
class RefusedWatch final : public grpc::ServerWriteReactor<v1::Alarm> {
 public:
  RefusedWatch(grpc::CallbackServerContext* ctx, const absl::Status& status) {
    AddRetryTrailer(status, ctx);
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* QueryServiceImpl::ListAlarms(grpc::CallbackServerContext* ctx,
                                                       const v1::ListAlarmsRequest* req, v1::ListAlarmsResponse* resp) {
  UnaryCall call(ctx, metrics_, "ListAlarms");
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth_, ownership_, registry_, req->model());
  if (!model.ok()) return call.Finish(model.status());
  absl::StatusOr<Model::AlarmList> list = (*model)->Alarms(req->since());
  if (!list.ok()) return call.Finish(list.status());
  resp->set_model(req->model());
  resp->set_armed_at(list->armed_at);
  for (const AlarmRecord& r : list->alarms) *resp->add_alarms() = AlarmProto(req->model(), r);
  resp->set_dropped(list->dropped);
  return call.Finish(absl::OkStatus());
}

grpc::ServerWriteReactor<v1::Alarm>* QueryServiceImpl::StartWatchAlarms(grpc::CallbackServerContext* ctx,
                                                                        const Checked<v1::WatchAlarmsRequest>* req) {
  if (absl::Status s = Authorize(auth_, *ctx, "WatchAlarms"); !s.ok()) {
    metrics_.ObserveRpc("WatchAlarms", 0, static_cast<int>(s.code()));
    return new RefusedWatch(ctx, s);
  }
  if (!req->parsed) {
    const absl::Status s =
        UnparsableRequest("the request to WatchAlarms", *v1::WatchAlarmsRequest::descriptor(), req->bytes, req->reason);
    metrics_.ObserveRpc("WatchAlarms", 0, static_cast<int>(s.code()));
    return new RefusedWatch(ctx, s);
  }
  const std::string& name = req->message.model();
  absl::Status found = ownership_ == nullptr ? absl::OkStatus() : ownership_->Check(name, *ctx, false);
  absl::StatusOr<std::shared_ptr<Model>> model =
      found.ok() ? registry_.Get(name) : absl::StatusOr<std::shared_ptr<Model>>(found);
  if (model.ok()) {
    if (absl::StatusOr<Model::AlarmList> probe = (*model)->Alarms(~uint64_t{0}); !probe.ok()) model = probe.status();
  }
  if (!model.ok()) {
    metrics_.ObserveRpc("WatchAlarms", 0, static_cast<int>(model.status().code()));
    return new RefusedWatch(ctx, model.status());
  }
  return new AlarmWatch(ctx, metrics_, registry_, *std::move(model), req->message.since());
}

}  // namespace cmestream::service
