#include "client/cpp/client.h"
#include "client/cpp/tls_key_pair.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"

namespace cmestream::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext& context) {
  absl::Status s = FromGrpcStatus(status);
  if (s.code() != absl::StatusCode::kFailedPrecondition) return s;
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find(kOwnerPayload); it != trailers.end()) {
    s.SetPayload(kOwnerPayload, absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return s;
}

std::optional<OwnerRedirect> OwnerFromStatus(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return std::nullopt;
  absl::optional<absl::Cord> payload = status.GetPayload(kOwnerPayload);
  if (!payload) return std::nullopt;
  const std::string text(*payload);
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) return std::nullopt;
  return OwnerRedirect{text.substr(0, eq), text.substr(eq + 1)};
}

std::string WithDefaultPort(const std::string& target, int port) {
  std::string prefix;
  std::string host = target;
  if (host.rfind("dns:///", 0) == 0) {
    prefix = "dns:///";
    host = host.substr(prefix.size());
  } else if (host.find("://") != std::string::npos) {
    return target;  // another URI scheme (unix:///path, ...): gRPC's business
  }
  if (host.empty()) return target;
  if (host[0] == '[') {  // "[v6]" or "[v6]:port"
    const size_t close = host.find(']');
    if (close == std::string::npos || close + 1 < host.size()) return target;
    return absl::StrCat(prefix, host, ":", port);
  }
  const auto colons = std::count(host.begin(), host.end(), ':');
  if (colons == 1) return target;  // host:port, or scheme:rest (unix:path, ipv4:addr)
  if (colons > 1) return absl::StrCat(prefix, "[", host, "]:", port);  // bare IPv6 address
  return absl::StrCat(prefix, host, ":", port);
}

absl::Status ClientOptions::Validate() const {
  if (target.empty()) return absl::InvalidArgumentError("target: expected HOST:PORT, got ''");
  if (!(timeout_seconds > 0) || !std::isfinite(timeout_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_seconds: expected a finite value > 0, got ", timeout_seconds));
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError("tls_cert_file and tls_key_file go together (client certificate and its key)");
  }
  if (!tls_cert_file.empty() && tls_ca_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs TLS: set tls_ca_file too");
  }
  if (token.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("token: contains a line break");
  }
  if (max_message_bytes < (4 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("max_message_bytes: expected >= 4 MiB, got ", max_message_bytes));
  }
  return absl::OkStatus();
}

absl::Status IngestStream::Options::Validate() const {
  if (batch_pairs < 1 || batch_pairs > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("batch_pairs: expected in [1, 1000000], got ", batch_pairs));
  }
  if (producer_id.empty() && start_offset != 0) {
    return absl::InvalidArgumentError("start_offset: only meaningful with a producer_id");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// IngestStream
// ---------------------------------------------------------------------------------------------

IngestStream::IngestStream(std::unique_ptr<grpc::ClientContext> context, v1::IngestService::Stub* stub,
                           std::string model, uint32_t dim, Options options)
    : context_(std::move(context)), model_(std::move(model)), dim_(dim), options_(std::move(options)) {
  stream_ = stub->Ingest(context_.get());
  summary_.next_offset = options_.start_offset;
  const size_t doubles = static_cast<size_t>(options_.batch_pairs + 1) * dim_;
  batch_.mutable_x()->Reserve(static_cast<int>(doubles));
  batch_.mutable_y()->Reserve(static_cast<int>(doubles));
  batch_.mutable_states()->Reserve(static_cast<int>(doubles));
  if (dim_ == 0) {
    const int ids = options_.batch_pairs + 1;
    batch_.mutable_x_ids()->Reserve(ids);
    batch_.mutable_y_ids()->Reserve(ids);
    batch_.mutable_state_ids()->Reserve(ids);
  }
  reader_ = std::thread([this] { ReadAcks(); });
}

IngestStream::~IngestStream() {
  if (!closed_) {
    // Abandoned without Finish(): cancel so that the reader thread returns.
    context_->TryCancel();
    if (reader_.joinable()) reader_.join();
    stream_->Finish().ok();
  } else if (reader_.joinable()) {
    reader_.join();
  }
}

void IngestStream::ReadAcks() {
  v1::IngestAck ack;
  while (stream_->Read(&ack)) {
    std::lock_guard<std::mutex> lock(mu_);
    ++summary_.batches_acked;
    summary_.pairs_acked += ack.pairs_received();
    summary_.pairs_applied += ack.pairs_applied();
    summary_.producer_offset = ack.producer_offset();
    summary_.model_samples = ack.model_samples();
  }
}

IngestStream::Summary IngestStream::Progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_;
}

absl::Status IngestStream::Fail() {
  // A failed Write means the server ended the stream; its status says why.
  closed_ = true;
  stream_->WritesDone();
  if (reader_.joinable()) reader_.join();
  final_status_ = FromGrpcStatus(stream_->Finish());
  if (final_status_.ok()) {
    final_status_ = absl::UnavailableError("ingest stream closed by the server before all batches");
  }
  return final_status_;
}

absl::Status IngestStream::SendBatch() {
  if (batch_pairs_filled_ == 0) return absl::OkStatus();
  batch_.set_model(model_);
  batch_.set_producer_id(options_.producer_id);
  batch_.set_episode_id(options_.episode_id);
  batch_.set_gap(gap_next_);
  gap_next_ = false;
  uint64_t offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    offset = summary_.next_offset;
  }
  batch_.set_offset(offset);
  if (!stream_->Write(batch_)) return Fail();
  sent_any_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++summary_.batches_sent;
    summary_.pairs_sent += batch_pairs_filled_;
    summary_.next_offset += batch_pairs_filled_;
  }
  batch_.clear_x();
  batch_.clear_y();
  batch_.clear_x_ids();
  batch_.clear_y_ids();
  if (mode_ == Mode::kTrajectory && discrete()) {
    auto* ids = batch_.mutable_state_ids();
    const int64_t last = ids->Get(ids->size() - 1);
    ids->Clear();
    ids->Add(last);
  } else if (mode_ == Mode::kTrajectory) {
    // Keep the last state as the first state of the next batch: the pair that straddles
    // the boundary is then carried by the next batch (proto: IngestBatch, trajectory form).
    auto* states = batch_.mutable_states();
    const int n = states->size();
    for (uint32_t j = 0; j < dim_; ++j) states->Set(static_cast<int>(j), states->Get(n - dim_ + j));
    states->Truncate(static_cast<int>(dim_));
  }
  batch_pairs_filled_ = 0;
  return absl::OkStatus();
}

template <typename AppendPairs>
absl::Status IngestStream::AddPairsInBatches(size_t n, AppendPairs append) {
  size_t i = 0;
  while (i < n) {
    const size_t take = std::min<size_t>(n - i, options_.batch_pairs - batch_pairs_filled_);
    append(i, take);
    batch_pairs_filled_ += static_cast<int>(take);
    i += take;
    if (batch_pairs_filled_ == options_.batch_pairs) {
      if (auto s = SendBatch(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status IngestStream::StateAdded() {
  if (have_last_state_) ++batch_pairs_filled_;
  have_last_state_ = true;
  if (batch_pairs_filled_ == options_.batch_pairs) return SendBatch();
  return absl::OkStatus();
}

absl::Status IngestStream::AddPairs(absl::Span<const double> x, absl::Span<const double> y) {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  if (discrete()) {
    return absl::FailedPreconditionError("AddPairs: this stream carries state ids (AddIdPairs)");
  }
  if (mode_ == Mode::kTrajectory) {
    return absl::FailedPreconditionError("AddPairs: this stream carries trajectory states");
  }
  if (x.size() != y.size() || x.size() % dim_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("AddPairs: expected x and y of equal size, a multiple of dim ", dim_,
                                                   "; got ", x.size(), " and ", y.size()));
  }
  mode_ = Mode::kPairs;
  return AddPairsInBatches(x.size() / dim_, [&](size_t i, size_t take) {
    batch_.mutable_x()->Add(x.begin() + i * dim_, x.begin() + (i + take) * dim_);
    batch_.mutable_y()->Add(y.begin() + i * dim_, y.begin() + (i + take) * dim_);
  });
}

absl::Status IngestStream::AddStates(absl::Span<const double> states) {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  if (discrete()) {
    return absl::FailedPreconditionError("AddStates: this stream carries state ids (AddStateIds)");
  }
  if (mode_ == Mode::kPairs) {
    return absl::FailedPreconditionError("AddStates: this stream carries pairs");
  }
  if (states.size() % dim_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddStates: expected a multiple of dim ", dim_, " doubles, got ", states.size()));
  }
  mode_ = Mode::kTrajectory;
  const size_t k = states.size() / dim_;
  for (size_t i = 0; i < k; ++i) {
    batch_.mutable_states()->Add(states.begin() + i * dim_, states.begin() + (i + 1) * dim_);
    if (auto s = StateAdded(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status IngestStream::AddIdPairs(absl::Span<const int64_t> x_ids, absl::Span<const int64_t> y_ids) {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  if (!discrete()) return absl::FailedPreconditionError("AddIdPairs: this stream carries vectors");
  if (mode_ == Mode::kTrajectory) {
    return absl::FailedPreconditionError("AddIdPairs: this stream carries trajectory ids");
  }
  if (x_ids.size() != y_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddIdPairs: expected x_ids and y_ids of equal size, got ", x_ids.size(), " and ", y_ids.size()));
  }
  mode_ = Mode::kPairs;
  return AddPairsInBatches(x_ids.size(), [&](size_t i, size_t take) {
    batch_.mutable_x_ids()->Add(x_ids.begin() + i, x_ids.begin() + i + take);
    batch_.mutable_y_ids()->Add(y_ids.begin() + i, y_ids.begin() + i + take);
  });
}

absl::Status IngestStream::AddStateIds(absl::Span<const int64_t> ids) {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  if (!discrete()) return absl::FailedPreconditionError("AddStateIds: this stream carries vectors");
  if (mode_ == Mode::kPairs) {
    return absl::FailedPreconditionError("AddStateIds: this stream carries pairs");
  }
  mode_ = Mode::kTrajectory;
  for (int64_t id : ids) {
    batch_.mutable_state_ids()->Add(id);
    if (auto s = StateAdded(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status IngestStream::EndEpisode(const std::string& next_episode_id) {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  if (auto s = SendBatch(); !s.ok()) return s;
  batch_.clear_states();
  batch_.clear_state_ids();
  have_last_state_ = false;
  options_.episode_id = next_episode_id;
  return absl::OkStatus();
}

absl::Status IngestStream::Gap() {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  if (mode_ == Mode::kPairs) return absl::FailedPreconditionError("Gap: this stream carries pairs");
  if (auto s = SendBatch(); !s.ok()) return s;
  batch_.clear_states();
  batch_.clear_state_ids();
  // Only once a state was sent or buffered: a gap before the first state separates nothing.
  gap_next_ = gap_next_ || have_last_state_ || sent_any_;
  have_last_state_ = false;
  return absl::OkStatus();
}

absl::Status IngestStream::Flush() {
  if (closed_) return absl::FailedPreconditionError("ingest stream already finished");
  return SendBatch();
}

absl::StatusOr<IngestStream::Summary> IngestStream::Finish() {
  if (closed_) {
    if (!final_status_.ok()) return final_status_;
    return absl::FailedPreconditionError("ingest stream already finished");
  }
  if (auto s = SendBatch(); !s.ok()) return s;
  closed_ = true;
  stream_->WritesDone();
  if (reader_.joinable()) reader_.join();
  final_status_ = FromGrpcStatus(stream_->Finish());
  if (!final_status_.ok()) return final_status_;
  Summary summary = Progress();
  if (summary.batches_acked != summary.batches_sent) {
    final_status_ = absl::DataLossError(
        absl::StrCat("ingest: sent ", summary.batches_sent, " batches but received ", summary.batches_acked, " acks"));
    return final_status_;
  }
  return summary;
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

namespace {

absl::StatusOr<std::string> ReadPem(const char* what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is not a PEM file"));
  }
  return text.str();
}

// A query request about `model` alone.
template <typename Request>
Request ModelRequest(const std::string& model) {
  Request request;
  request.set_model(model);
  return request;
}

// A query request about `model` at query points: vectors of a continuous model or state ids of a
// discrete one (the other empty).
template <typename Request>
Request PointsRequest(const std::string& model, absl::Span<const double> points, absl::Span<const int64_t> state_ids) {
  Request request;
  request.set_model(model);
  request.mutable_points()->Add(points.begin(), points.end());
  request.mutable_state_ids()->Add(state_ids.begin(), state_ids.end());
  return request;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (auto s = options.Validate(); !s.ok()) return s;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadPem("TLS CA", options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadPem("TLS client certificate", options.tls_cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("TLS client key", options.tls_key_file);
      if (!key.ok()) return key.status();
      // Checked here, where the files can be named; gRPC would only fail the connection.
      if (absl::Status s = CheckTlsKeyPair(options.tls_cert_file, *cert, options.tls_key_file, *key); !s.ok()) {
        return s;
      }
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(ssl);
  }
  return std::unique_ptr<Client>(new Client(options, std::move(credentials)));
}

Client::Client(const ClientOptions& options, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  channel_ = grpc::CreateCustomChannel(WithDefaultPort(options_.target), credentials, args);
  models_ = v1::ModelService::NewStub(channel_);
  ingest_ = v1::IngestService::NewStub(channel_);
  queries_ = v1::QueryService::NewStub(channel_);
}

void Client::Authenticate(grpc::ClientContext* context) const {
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
  if (options_.ignore_placement) context->AddMetadata("cmestream-placement", "ignore");
}

template <typename Rpc>
absl::Status Client::Unary(Rpc&& rpc, double extra_seconds) const {
  const auto attempt = [&](const Client& c) {
    grpc::ClientContext context;
    c.SetDeadline(&context, extra_seconds);
    return FromGrpcStatus(rpc(c, &context), context);
  };
  absl::Status s = attempt(*this);
  if (!options_.follow_owner) return s;
  const std::optional<OwnerRedirect> owner = OwnerFromStatus(s);
  if (!owner) return s;
  absl::StatusOr<const Client*> other = Redirected(owner->target);
  if (!other.ok()) return s;
  return attempt(**other);  // one redirect: a second refusal is the answer
}

absl::StatusOr<const Client*> Client::Redirected(const std::string& target) const {
  std::lock_guard<std::mutex> lock(redirects_mu_);
  std::unique_ptr<Client>& c = redirects_[target];
  if (!c) {
    ClientOptions o = options_;
    o.target = target;
    o.follow_owner = false;
    absl::StatusOr<std::unique_ptr<Client>> made = Connect(o);
    if (!made.ok()) {
      redirects_.erase(target);
      return made.status();
    }
    c = *std::move(made);
  }
  return c.get();
}

const Client& Client::OwnerClient(const std::string& model) const {
  if (!options_.follow_owner) return *this;
  v1::GetModelRequest request;
  request.set_name(model);
  v1::ModelInfo reply;
  grpc::ClientContext context;
  SetDeadline(&context);
  const std::optional<OwnerRedirect> owner =
      OwnerFromStatus(FromGrpcStatus(models_->GetModel(&context, request, &reply), context));
  if (!owner) return *this;
  absl::StatusOr<const Client*> other = Redirected(owner->target);
  return other.ok() ? **other : *this;
}

void Client::SetDeadline(grpc::ClientContext* context, double extra_seconds) const {
  Authenticate(context);
  const auto span = std::chrono::duration<double>(options_.timeout_seconds + extra_seconds);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(span));
}

template <typename Response, typename Stub, typename Method, typename Request>
absl::StatusOr<Response> Client::Call(std::unique_ptr<Stub> Client::*stub, Method method, const Request& request,
                                      double extra_seconds) const {
  Response reply;
  if (auto s = Unary(
          [&](const Client& c, grpc::ClientContext* ctx) { return ((c.*stub).get()->*method)(ctx, request, &reply); },
          extra_seconds);
      !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::ModelInfo> Client::CreateModel(const v1::ModelConfig& config) {
  v1::CreateModelRequest request;
  *request.mutable_config() = config;
  return Call<v1::ModelInfo>(&Client::models_, &v1::ModelService::Stub::CreateModel, request);
}

absl::StatusOr<v1::ModelInfo> Client::Describe(const std::string& name, bool with_memory) {
  v1::GetModelRequest request;
  request.set_name(name);
  request.set_with_memory(with_memory);
  return Call<v1::ModelInfo>(&Client::models_, &v1::ModelService::Stub::GetModel, request);
}

absl::StatusOr<std::vector<v1::ModelInfo>> Client::List() {
  // In pages of 1,000 models, so a fleet's listing never needs one huge reply.
  std::vector<v1::ModelInfo> out;
  v1::ListModelsRequest request;
  request.set_page_size(1000);
  do {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::ListModelsResponse reply;
    if (auto s = FromGrpcStatus(models_->ListModels(&context, request, &reply)); !s.ok()) return s;
    out.insert(out.end(), reply.models().begin(), reply.models().end());
    request.set_page_token(reply.next_page_token());
  } while (!request.page_token().empty());
  return out;
}

absl::Status Client::Delete(const std::string& name) {
  v1::DeleteModelRequest request;
  request.set_name(name);
  v1::DeleteModelResponse reply;
  return Unary([&](const Client& c, grpc::ClientContext* ctx) { return c.models_->DeleteModel(ctx, request, &reply); });
}

absl::StatusOr<v1::SnapshotResponse> Client::Snapshot() {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::SnapshotResponse reply;
  if (auto s = FromGrpcStatus(models_->Snapshot(&context, v1::SnapshotRequest(), &reply)); !s.ok()) return s;
  return reply;
}

absl::StatusOr<bool> Client::Health(const std::string& service) {
  // Debian's gRPC ships no generated health stubs: the two tiny messages are encoded by hand.
  // HealthCheckRequest { string service = 1; }, HealthCheckResponse { ServingStatus status = 1; }
  // with SERVING = 1.
  if (service.size() > 127) return absl::InvalidArgumentError("health: service name longer than 127 bytes");
  std::string request;
  if (!service.empty()) {
    request.push_back('\x0a');
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  grpc::ClientContext context;
  SetDeadline(&context);
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel_.get(), method, &context, request_buffer, &response_buffer);
  if (auto s = FromGrpcStatus(status); !s.ok()) return s;
  std::vector<grpc::Slice> slices;
  if (!response_buffer.Dump(&slices).ok()) return absl::InternalError("health: unreadable reply");
  std::string reply;
  for (const grpc::Slice& s : slices) reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // Field 1 varint: 0x08 then the status (absent = UNKNOWN = 0).
  return reply.size() >= 2 && reply[0] == '\x08' && reply[1] == 1;
}

absl::StatusOr<std::string> Client::ExportModel(const std::string& name) {
  v1::ExportModelRequest request;
  request.set_name(name);
  auto reply = Call<v1::ExportModelResponse>(&Client::models_, &v1::ModelService::Stub::ExportModel, request);
  if (!reply.ok()) return reply.status();
  return std::move(*reply->mutable_data());
}

absl::StatusOr<v1::ModelInfo> Client::ImportModel(std::string data, const std::string& new_name) {
  v1::ImportModelRequest request;
  *request.mutable_data() = std::move(data);
  request.set_name(new_name);
  return Call<v1::ModelInfo>(&Client::models_, &v1::ModelService::Stub::ImportModel, request);
}

absl::StatusOr<v1::ProducerStatus> Client::GetProducer(const std::string& model, const std::string& producer_id) {
  v1::GetProducerRequest request;
  request.set_model(model);
  request.set_producer_id(producer_id);
  return Call<v1::ProducerStatus>(&Client::ingest_, &v1::IngestService::Stub::GetProducer, request);
}

absl::StatusOr<std::unique_ptr<IngestStream>> Client::OpenIngest(const std::string& model, uint32_t dim,
                                                                 const IngestStream::Options& options) {
  if (auto s = options.Validate(); !s.ok()) return s;
  if (dim == 0) return absl::InvalidArgumentError("OpenIngest: dim must be >= 1");
  // No deadline: a stream lives as long as the producer has data. With follow_owner the stream
  // goes to the model's owner (a stream cannot be redirected once batches are in flight).
  const Client& owner = OwnerClient(model);
  auto context = std::make_unique<grpc::ClientContext>();
  owner.Authenticate(context.get());
  return std::unique_ptr<IngestStream>(new IngestStream(std::move(context), owner.ingest_.get(), model, dim, options));
}

absl::StatusOr<std::unique_ptr<IngestStream>> Client::OpenDiscreteIngest(const std::string& model,
                                                                         const IngestStream::Options& options) {
  if (auto s = options.Validate(); !s.ok()) return s;
  const Client& owner = OwnerClient(model);
  auto context = std::make_unique<grpc::ClientContext>();
  owner.Authenticate(context.get());
  return std::unique_ptr<IngestStream>(
      new IngestStream(std::move(context), owner.ingest_.get(), model, /*dim=*/0, options));
}

absl::StatusOr<v1::ViewInfo> Client::Refresh(const std::string& model, bool wait, double wait_timeout_seconds) {
  v1::RefreshRequest request;
  request.set_model(model);
  request.set_wait(wait);
  request.set_timeout_seconds(wait_timeout_seconds);
  auto reply = Call<v1::RefreshResponse>(&Client::queries_, &v1::QueryService::Stub::Refresh, request,
                                         wait ? wait_timeout_seconds : 0);
  if (!reply.ok()) return reply.status();
  return reply->view();
}

template <typename Response, typename Request, typename Method>
absl::StatusOr<Response> Client::Query(Method method, const Request& request) const {
  return Call<Response>(&Client::queries_, method, request);
}

absl::StatusOr<v1::KoopmanResponse> Client::Koopman(const std::string& model, uint32_t top,
                                                    absl::Span<const double> points) {
  v1::KoopmanRequest request;
  request.set_model(model);
  request.set_top(top);
  request.mutable_points()->Add(points.begin(), points.end());
  return Query<v1::KoopmanResponse>(&v1::QueryService::Stub::GetKoopman, request);
}

absl::StatusOr<v1::PredictResponse> Client::Predict(const std::string& model, absl::Span<const double> points) {
  v1::PredictRequest request;
  request.set_model(model);
  request.mutable_points()->Add(points.begin(), points.end());
  return Query<v1::PredictResponse>(&v1::QueryService::Stub::Predict, request);
}

absl::StatusOr<v1::DictionaryResponse> Client::Dictionary(const std::string& model) {
  return Query<v1::DictionaryResponse>(&v1::QueryService::Stub::GetDictionary,
                                       ModelRequest<v1::DictionaryRequest>(model));
}

absl::StatusOr<v1::CountsResponse> Client::Counts(const std::string& model) {
  return Query<v1::CountsResponse>(&v1::QueryService::Stub::GetCounts, ModelRequest<v1::CountsRequest>(model));
}

absl::StatusOr<v1::EmbeddingResponse> Client::Embedding(const std::string& model, absl::Span<const double> points,
                                                        absl::Span<const int64_t> state_ids) {
  return Query<v1::EmbeddingResponse>(&v1::QueryService::Stub::GetEmbedding,
                                      PointsRequest<v1::EmbeddingRequest>(model, points, state_ids));
}

absl::StatusOr<v1::ClustersResponse> Client::Clusters(const std::string& model, absl::Span<const double> points,
                                                      absl::Span<const int64_t> state_ids) {
  return Query<v1::ClustersResponse>(&v1::QueryService::Stub::GetClusters,
                                     PointsRequest<v1::ClustersRequest>(model, points, state_ids));
}

absl::StatusOr<v1::AggregationResponse> Client::Aggregation(const std::string& model) {
  return Query<v1::AggregationResponse>(&v1::QueryService::Stub::GetAggregation,
                                        ModelRequest<v1::AggregationRequest>(model));
}

absl::StatusOr<v1::LatentResponse> Client::Latent(const std::string& model, absl::Span<const double> points,
                                                  absl::Span<const int64_t> state_ids) {
  return Query<v1::LatentResponse>(&v1::QueryService::Stub::GetLatent,
                                   PointsRequest<v1::LatentRequest>(model, points, state_ids));
}

absl::StatusOr<v1::ForecastResponse> Client::Forecast(const std::string& model, absl::Span<const double> window,
                                                      absl::Span<const int64_t> window_ids, uint32_t horizon) {
  if (horizon < 1) return absl::InvalidArgumentError("horizon: expected >= 1, got 0");
  v1::ForecastRequest request;
  request.set_model(model);
  request.mutable_window()->Add(window.begin(), window.end());
  request.mutable_window_ids()->Add(window_ids.begin(), window_ids.end());
  request.set_horizon(horizon);
  return Query<v1::ForecastResponse>(&v1::QueryService::Stub::Forecast, request);
}

absl::StatusOr<v1::ForecastResponse> Client::ForecastSeries(const std::string& model, absl::Span<const double> series,
                                                            uint32_t horizon) {
  if (horizon < 1) return absl::InvalidArgumentError("horizon: expected >= 1, got 0");
  v1::ForecastRequest request;
  request.set_model(model);
  request.mutable_series()->Add(series.begin(), series.end());
  request.set_horizon(horizon);
  return Query<v1::ForecastResponse>(&v1::QueryService::Stub::Forecast, request);
}

absl::StatusOr<v1::TimescalesResponse> Client::Timescales(const std::string& model) {
  return Query<v1::TimescalesResponse>(&v1::QueryService::Stub::GetTimescales,
                                       ModelRequest<v1::TimescalesRequest>(model));
}

absl::StatusOr<v1::ListAlarmsResponse> Client::ListAlarms(const std::string& model, uint64_t since) {
  v1::ListAlarmsRequest request;
  request.set_model(model);
  request.set_since(since);
  return Query<v1::ListAlarmsResponse>(&v1::QueryService::Stub::ListAlarms, request);
}

absl::Status Client::WatchAlarms(const std::string& model, uint64_t since, double seconds,
                                 const std::function<bool(const v1::Alarm&)>& on_alarm) {
  v1::WatchAlarmsRequest request;
  request.set_model(model);
  request.set_since(since);
  grpc::ClientContext context;
  Authenticate(&context);
  if (seconds > 0) {
    context.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(seconds)));
  }
  std::unique_ptr<grpc::ClientReader<v1::Alarm>> reader = queries_->WatchAlarms(&context, request);
  v1::Alarm alarm;
  bool stopped = false;
  while (reader->Read(&alarm)) {
    if (!on_alarm(alarm)) {
      stopped = true;
      context.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (stopped || (seconds > 0 && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
    return absl::OkStatus();
  }
  return FromGrpcStatus(status, context);
}

absl::StatusOr<v1::CkTestResponse> Client::CkTest(const std::string& model, uint32_t clusters, uint32_t steps,
                                                  uint32_t lag) {
  v1::CkTestRequest request;
  request.set_model(model);
  request.set_clusters(clusters);
  request.set_steps(steps);
  request.set_lag(lag);
  return Query<v1::CkTestResponse>(&v1::QueryService::Stub::CkTest, request);
}

}  // namespace cmestream::client
