// Requests whose bytes are not the method's protobuf message, sent raw (grpc::GenericStub) to
// every RPC of the proto: each answers INVALID_ARGUMENT naming the message type (gRPC's callback
// API alone answers UNIMPLEMENTED with an empty message, and ends an Ingest stream OK with no
// acks), after the token check, and nothing changes. In-process daemon on loopback port 0.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/daemon.h"
#include "tests/integration/generic_call.h"

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::AllMethods;
using testing_util::RawBidi;
using testing_util::RawCall;

const std::string kAdmin = "admin-token-0123456789abcdef";

// Bytes no protobuf message parses from: a length-delimited field 1 that claims 100 bytes and
// has 5; an end-group tag that was never opened (wire type 4); a varint tag of 11 bytes.
const std::vector<std::string> kGarbage = {std::string("\x0a\x64short", 7), std::string("\x0c", 1),
                                           std::string(11, '\xff')};

class MalformedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cmestreamd-malformed-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (daemon_) daemon_->Shutdown();
    fs::remove_all(dir_);
  }
  void Start(const std::string& tokens = "") {
    service::DaemonOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.data_dir = (dir_ / "data").string();
    options.refresh_interval_seconds = 3600;
    options.shutdown_grace_seconds = 1;
    if (!tokens.empty()) {
      std::ofstream(dir_ / "tokens") << tokens;
      fs::permissions(dir_ / "tokens", fs::perms::owner_read | fs::perms::owner_write);
      options.security.auth_tokens = (dir_ / "tokens").string();
    }
    absl::StatusOr<std::unique_ptr<service::Daemon>> daemon = service::Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    channel_ = grpc::CreateChannel(daemon_->grpc_address(), grpc::InsecureChannelCredentials());
  }
  // A model "m" (dim 1) and its sample count.
  void CreateModel() {
    auto stub = v1::ModelService::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + kAdmin);
    v1::CreateModelRequest req;
    req.mutable_config()->set_name("m");
    req.mutable_config()->set_dim(1);
    req.mutable_config()->set_sigma(0.5);
    v1::ModelInfo info;
    ASSERT_TRUE(stub->CreateModel(&ctx, req, &info).ok());
  }
  uint64_t Samples() {
    auto stub = v1::ModelService::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + kAdmin);
    v1::GetModelRequest req;
    req.set_name("m");
    v1::ModelInfo info;
    EXPECT_TRUE(stub->GetModel(&ctx, req, &info).ok());
    return info.samples();
  }
  static std::string Pairs(int n) {
    v1::IngestBatch batch;
    batch.set_model("m");
    for (int i = 0; i < n; ++i) {
      batch.add_x(0.01 * i);
      batch.add_y(0.01 * i + 0.005);
    }
    return batch.SerializeAsString();
  }

  fs::path dir_;
  std::unique_ptr<service::Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(MalformedRequestTest, EveryRpcAnswersInvalidArgumentNamingTheMessageType) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(CreateModel());
  int methods = 0;
  for (const google::protobuf::MethodDescriptor* m : AllMethods()) {
    ++methods;
    for (const std::string& garbage : kGarbage) {
      std::unique_ptr<google::protobuf::Message> probe(
          google::protobuf::MessageFactory::generated_factory()->GetPrototype(m->input_type())->New());
      ASSERT_FALSE(probe->ParseFromString(garbage)) << "not garbage for " << m->input_type()->full_name();
      const grpc::Status s = RawCall(channel_, *m, garbage).status;
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << m->full_name() << ": " << s.error_code() << " '" << s.error_message() << "'";
      const std::string what = m->client_streaming() ? "batch 0 of this Ingest stream" : "the request to " + m->name();
      EXPECT_THAT(
          s.error_message(),
          HasSubstr(what + (m->client_streaming() ? " (the batches before it are applied)" : "") + " is not a valid " +
                    m->input_type()->full_name() + ": its " + std::to_string(garbage.size()) + " bytes do not parse"))
          << m->full_name();
    }
  }
  EXPECT_GE(methods, 22);
  EXPECT_EQ(Samples(), 0u);
}

// A string field that is not UTF-8 fails proto3 parsing: the same answer, naming the cause.
TEST_F(MalformedRequestTest, StringThatIsNotUtf8IsInvalidArgument) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const grpc::Status s =
      testing_util::RawUnary(channel_, "/cmestream.v1.ModelService/GetModel", std::string("\x0a\x02\xff\xfe", 4))
          .status;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("not UTF-8"));
}

// Garbage after good batches: the good ones are acknowledged and applied, the stream ends with
// INVALID_ARGUMENT naming the bad batch's position, and nothing after it is read.
TEST_F(MalformedRequestTest, IngestStreamEndsAtTheUnparsableBatch) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(CreateModel());
  const testing_util::RawReply r =
      RawBidi(channel_, "/cmestream.v1.IngestService/Ingest", {Pairs(5), Pairs(7), kGarbage[0], Pairs(11)});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << r.status.error_message();
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("batch 2 of this Ingest stream (the batches before it are applied) is not a valid "
                        "cmestream.v1.IngestBatch: its 7 bytes do not parse"));
  ASSERT_EQ(r.messages.size(), 2u);
  v1::IngestAck ack;
  ASSERT_TRUE(ack.ParseFromString(r.messages[1]));
  EXPECT_EQ(ack.batch_index(), 1u);
  EXPECT_EQ(Samples(), 12u);
}

// With tokens: an unauthenticated caller learns UNAUTHENTICATED, not whether its bytes parsed.
TEST_F(MalformedRequestTest, TheTokenIsCheckedFirst) {
  ASSERT_NO_FATAL_FAILURE(Start(kAdmin + " admin\n"));
  for (const google::protobuf::MethodDescriptor* m : AllMethods()) {
    const grpc::Status anonymous = RawCall(channel_, *m, kGarbage[0]).status;
    EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED) << m->full_name();
    const grpc::Status admin = RawCall(channel_, *m, kGarbage[0], kAdmin).status;
    EXPECT_EQ(admin.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << m->full_name() << " " << admin.error_message();
  }
}

}  // namespace
}  // namespace cmestream
