// Security of cmestreamd: TLS with a test CA generated at test time by the
// openssl CLI (server certificate; optional verified client certificates), a plaintext client
// refused by a TLS server, a key that is not the certificate's, bearer tokens with scopes
// (UNAUTHENTICATED / PERMISSION_DENIED) over every RPC of the proto, health checking left open,
// and the token-file parser. In-process daemon on loopback port 0.
#include <sys/stat.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "client/cpp/client.h"
#include "cmestream/v1/cmestream.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "service/daemon.h"
#include "service/flags.h"
#include "service/rpc/auth.h"
#include "service/rpc/tls.h"
#include "tests/integration/generic_call.h"

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kAdmin = "admin-token-0123456789abcdef";
const std::string kWriter = "write-token-0123456789abcdef";
const std::string kReader = "read-token-0123456789abcdef";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, both signed by
// the CA, plus a second CA that signed nothing the server trusts.
class Pki {
 public:
  explicit Pki(const fs::path& dir) : dir_(dir) {}
  bool Generate() {
    const std::string d = dir_.string();
    const std::string q = " >/dev/null 2>&1";
    std::ofstream(dir_ / "san.cnf") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
    const std::string cmds[] = {
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=cmestream-test-ca -keyout " + d + "/ca.key -out " +
            d + "/ca.pem",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout " + d + "/server.key -out " + d +
            "/server.csr",
        "openssl x509 -req -in " + d + "/server.csr -CA " + d + "/ca.pem -CAkey " + d +
            "/ca.key -CAcreateserial -days 2 " + "-extfile " + d + "/san.cnf -out " + d + "/server.pem",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=producer -keyout " + d + "/client.key -out " + d + "/client.csr",
        "openssl x509 -req -in " + d + "/client.csr -CA " + d + "/ca.pem -CAkey " + d +
            "/ca.key -CAcreateserial -days 2 " + "-out " + d + "/client.pem",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca -keyout " + d + "/other.key -out " + d +
            "/other.pem",
    };
    for (const std::string& c : cmds) {
      if (std::system((c + q).c_str()) != 0) {
        error_ = c;
        return false;
      }
    }
    return true;
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::string pem(const char* name) const { return ReadFile(dir_ / name); }
  const std::string& error() const { return error_; }

 private:
  fs::path dir_;
  std::string error_;
};

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cmestreamd-security-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (daemon_) daemon_->Shutdown();
    fs::remove_all(dir_);
  }
  absl::Status Start(const service::SecurityOptions& security) {
    service::DaemonOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.data_dir = (dir_ / "data").string();
    options.refresh_interval_seconds = 3600;
    options.shutdown_grace_seconds = 1;
    options.security = security;
    absl::StatusOr<std::unique_ptr<service::Daemon>> daemon = service::Daemon::Start(options);
    if (!daemon.ok()) return daemon.status();
    daemon_ = *std::move(daemon);
    return absl::OkStatus();
  }
  std::string WriteTokens(const std::string& text, mode_t mode = 0600) {
    const fs::path p = dir_ / "tokens";
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p.string();
  }
  std::shared_ptr<grpc::Channel> Plain() {
    return grpc::CreateChannel(daemon_->grpc_address(), grpc::InsecureChannelCredentials());
  }
  std::shared_ptr<grpc::Channel> Tls(const Pki& pki, bool client_cert, const char* ca = "ca.pem") {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pki.pem(ca);
    if (client_cert) {
      o.pem_private_key = pki.pem("client.key");
      o.pem_cert_chain = pki.pem("client.pem");
    }
    return grpc::CreateChannel(daemon_->grpc_address(), grpc::SslCredentials(o));
  }
  static grpc::Status List(const std::shared_ptr<grpc::Channel>& channel, const std::string& token = "") {
    auto stub = v1::ModelService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ListModelsResponse resp;
    return stub->ListModels(&ctx, v1::ListModelsRequest(), &resp);
  }
  bool HavePki(Pki& pki) {
    if (std::system("openssl version >/dev/null 2>&1") != 0) return false;
    return pki.Generate();
  }

  fs::path dir_;
  std::unique_ptr<service::Daemon> daemon_;
};

TEST_F(SecurityTest, TlsWithTestCaWorksAndPlaintextIsRefused) {
  Pki pki(dir_);
  ASSERT_TRUE(HavePki(pki)) << "openssl failed: " << pki.error();
  service::SecurityOptions sec;
  sec.tls_cert = pki.path("server.pem");
  sec.tls_key = pki.path("server.key");
  ASSERT_TRUE(Start(sec).ok());
  EXPECT_TRUE(List(Tls(pki, false)).ok());
  grpc::Status plain = List(Plain());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // A client that trusts another CA refuses the server's certificate.
  EXPECT_EQ(List(Tls(pki, false, "other.pem")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, ClientCertificateRequiredAndVerified) {
  Pki pki(dir_);
  ASSERT_TRUE(HavePki(pki)) << "openssl failed: " << pki.error();
  service::SecurityOptions sec;
  sec.tls_cert = pki.path("server.pem");
  sec.tls_key = pki.path("server.key");
  sec.tls_client_ca = pki.path("ca.pem");
  ASSERT_TRUE(Start(sec).ok());
  EXPECT_TRUE(List(Tls(pki, true)).ok());
  EXPECT_EQ(List(Tls(pki, false)).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(List(Plain()).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, BadTlsFilesFailTheStartNamingTheFlag) {
  service::SecurityOptions sec;
  sec.tls_cert = (dir_ / "missing.pem").string();
  sec.tls_key = (dir_ / "missing.key").string();
  absl::Status s = Start(sec);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("flag --tls-cert: cannot read"));
  std::ofstream(dir_ / "junk.pem") << "not a certificate\n";
  sec.tls_cert = (dir_ / "junk.pem").string();
  s = Start(sec);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not a PEM file"));
  sec.tls_key.clear();
  EXPECT_THAT(std::string(sec.Validate().message()), HasSubstr("--tls-cert and --tls-key go together"));
}

// gRPC would load the pair only when binding the port and report a mismatch as a port it cannot
// bind; the start names the flags instead, before anything binds.
TEST_F(SecurityTest, KeyThatIsNotTheCertificatesFailsTheStartNamingBothFlags) {
  Pki pki(dir_);
  ASSERT_TRUE(HavePki(pki)) << "openssl failed: " << pki.error();
  service::SecurityOptions sec;
  sec.tls_cert = pki.path("server.pem");
  sec.tls_key = pki.path("other.key");  // a valid key, of another certificate
  absl::Status s = Start(sec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("flags --tls-cert and --tls-key do not match: the private key in '" +
                                                  pki.path("other.key") + "' is not the key of the certificate in '" +
                                                  pki.path("server.pem") + "' (subject /CN=localhost)"));
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("cannot serve gRPC")));
  EXPECT_FALSE(fs::exists(dir_ / "data"));  // refused before the data directory is touched

  // The two files swapped.
  sec.tls_cert = pki.path("server.key");
  sec.tls_key = pki.path("server.pem");
  s = Start(sec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("flag --tls-cert: '" + pki.path("server.key") + "' holds no PEM certificate"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("are swapped?"));

  // A key encrypted with a passphrase (never prompted for).
  ASSERT_EQ(std::system(("openssl pkey -in " + pki.path("server.key") + " -aes256 -passout pass:secret -out " +
                         pki.path("encrypted.key") + " >/dev/null 2>&1")
                            .c_str()),
            0);
  sec.tls_cert = pki.path("server.pem");
  sec.tls_key = pki.path("encrypted.key");
  s = Start(sec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("flag --tls-key: '" + pki.path("encrypted.key") +
                                                  "' holds no private key that can be read: it is encrypted"));

  // A client CA file without a certificate.
  std::ofstream(dir_ / "ca-junk.pem") << "-----BEGIN NOTHING-----\n";
  sec.tls_key = pki.path("server.key");
  sec.tls_client_ca = (dir_ / "ca-junk.pem").string();
  s = Start(sec);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("flag --tls-client-ca: '" + sec.tls_client_ca + "' holds no PEM certificate"));

  // The matching pair still starts.
  sec.tls_client_ca.clear();
  ASSERT_TRUE(Start(sec).ok());
  EXPECT_TRUE(List(Tls(pki, false)).ok());
}

// The scope table against the proto: every RPC of every cmestream.v1 service has exactly one
// row (a new RPC fails here until it is classified), no row names an RPC that does not exist,
// and the read-only ones (every QueryService query, GetModel, ListModels) need only read.
// A client key that is not its certificate's: gRPC would only fail the connection ("empty
// address list: (UNAVAILABLE)"); Client::Connect refuses first and names both files.
TEST_F(SecurityTest, ClientKeyThatIsNotItsCertificatesIsRefusedBeforeConnectingNamingBothFiles) {
  Pki pki(dir_);
  ASSERT_TRUE(HavePki(pki)) << "openssl failed: " << pki.error();
  client::ClientOptions o;
  o.tls_ca_file = pki.path("ca.pem");
  o.tls_cert_file = pki.path("client.pem");
  o.tls_key_file = pki.path("other.key");  // a valid key, of another certificate
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_EQ(std::string(c.status().message()), "TLS client certificate and key do not match: the private key in '" +
                                                   pki.path("other.key") + "' is not the key of the certificate in '" +
                                                   pki.path("client.pem") + "' (subject /CN=producer)");
  o.tls_key_file = pki.path("client.pem");  // a certificate where the key belongs
  c = client::Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("holds no private key that can be read"));
  o.tls_key_file = pki.path("client.key");
  EXPECT_TRUE(client::Client::Connect(o).ok());
}

TEST(ScopeTableTest, EveryRpcOfTheProtoIsClassifiedAndQueriesNeedOnlyRead) {
  std::set<std::string> in_proto;
  for (const google::protobuf::MethodDescriptor* m : testing_util::AllMethods()) {
    EXPECT_TRUE(in_proto.insert(m->name()).second) << m->full_name() << ": short names must be unique";
    int rows = 0;
    for (const service::MethodScope& row : service::ScopeTable()) rows += row.method == m->name();
    EXPECT_EQ(rows, 1) << m->full_name() << " must have exactly one row in auth.cc's ScopeTable";
    if (m->service()->name() == "QueryService" || m->name() == "GetModel" || m->name() == "ListModels") {
      EXPECT_EQ(service::RequiredScope(m->name()), service::Scope::kRead) << m->full_name() << " is read-only";
    }
  }
  EXPECT_GE(in_proto.size(), 22u);
  for (const service::MethodScope& row : service::ScopeTable()) {
    EXPECT_EQ(in_proto.count(std::string(row.method)), 1u) << row.method << " is in ScopeTable but not in the proto";
  }
  EXPECT_EQ(service::RequiredScope("GetTimescales"), service::Scope::kRead);
  EXPECT_EQ(service::RequiredScope("CkTest"), service::Scope::kRead);
  EXPECT_EQ(service::RequiredScope("NoSuchMethod"), service::Scope::kAdmin);  // fail closed
}

// Every RPC of the proto (raw calls: nothing is listed by hand) with no token, an unknown token
// and read, write and admin tokens: UNAUTHENTICATED, then PERMISSION_DENIED exactly below the
// method's scope, and above it the method's own answer (about a model that does not exist).
TEST_F(SecurityTest, ScopeMatrixOverEveryRpcOfTheProto) {
  service::SecurityOptions sec;
  sec.auth_tokens = WriteTokens(kAdmin + " admin\n" + kWriter + " write\n" + kReader + " read\n");
  ASSERT_TRUE(Start(sec).ok());
  auto channel = Plain();
  const std::pair<std::string, service::Scope> credentials[] = {{"", service::Scope::kNone},
                                                                {"unknown-token-0123456789", service::Scope::kNone},
                                                                {kReader, service::Scope::kRead},
                                                                {kWriter, service::Scope::kWrite},
                                                                {kAdmin, service::Scope::kAdmin}};
  int calls = 0;
  for (const google::protobuf::MethodDescriptor* m : testing_util::AllMethods()) {
    // The request: the method's message with its model field naming a model that does not exist.
    std::unique_ptr<google::protobuf::Message> req(
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(m->input_type())->New());
    for (const char* field : {"model", "name"}) {
      const google::protobuf::FieldDescriptor* f = m->input_type()->FindFieldByName(field);
      if (f != nullptr && f->type() == google::protobuf::FieldDescriptor::TYPE_STRING && !f->is_repeated()) {
        req->GetReflection()->SetString(req.get(), f, "absent");
      }
    }
    const std::string bytes = req->SerializeAsString();
    const service::Scope needed = service::RequiredScope(m->name());
    for (const auto& [token, have] : credentials) {
      const grpc::Status s = testing_util::RawCall(channel, *m, bytes, token).status;
      ++calls;
      const std::string where = m->full_name() + " with a " + service::ScopeName(have) +
                                " token: " + std::to_string(s.error_code()) + " " + s.error_message();
      if (have == service::Scope::kNone) {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << where;
      } else if (have < needed) {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << where;
        EXPECT_THAT(s.error_message(), HasSubstr(m->name() + " requires scope '" + service::ScopeName(needed) +
                                                 "'; this token has scope '" + service::ScopeName(have) + "'"));
      } else {
        EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << where;
        EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << where;
        EXPECT_NE(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << where;
      }
    }
  }
  EXPECT_GE(calls, 22 * 5);
}

// The scope table end to end: no token, wrong token, read, write and admin tokens.
TEST_F(SecurityTest, TokensAndScopes) {
  service::SecurityOptions sec;
  sec.auth_tokens =
      WriteTokens("# test tokens\n" + kAdmin + " admin\n" + kWriter + " write   # producer\n\n" + kReader + " read\n");
  ASSERT_TRUE(Start(sec).ok());
  auto channel = Plain();
  auto models = v1::ModelService::NewStub(channel);
  auto ingest = v1::IngestService::NewStub(channel);
  auto create = [&](const std::string& token, const std::string& name) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::CreateModelRequest req;
    req.mutable_config()->set_name(name);
    req.mutable_config()->set_dim(1);
    req.mutable_config()->set_sigma(0.5);
    v1::ModelInfo info;
    return models->CreateModel(&ctx, req, &info);
  };
  v1::IngestBatch batch;
  batch.set_model("m");
  batch.add_x(0.1);
  batch.add_y(0.2);
  auto ingest_one = [&](const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::IngestAck ack;
    return ingest->IngestOne(&ctx, batch, &ack);
  };
  auto ingest_stream = [&](const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto stream = ingest->Ingest(&ctx);
    stream->Write(batch);
    stream->WritesDone();
    v1::IngestAck ack;
    while (stream->Read(&ack)) {
    }
    return stream->Finish();
  };
  auto samples = [&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + kReader);
    v1::GetModelRequest req;
    req.set_name("m");
    v1::ModelInfo info;
    EXPECT_TRUE(models->GetModel(&ctx, req, &info).ok());
    return info.samples();
  };

  // Create: admin only.
  grpc::Status s = create("", "m");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("CreateModel requires a bearer token"));
  s = create(kWriter, "m");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("CreateModel requires scope 'admin'; this token has scope 'write'"));
  ASSERT_TRUE(create(kAdmin, "m").ok());

  // Ingest: no token, a wrong token, a read token refused; write and admin accepted.
  s = ingest_one("");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ingest_stream("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  s = ingest_one("not-a-token-of-this-daemon");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("not valid"));
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("not-a-token")));  // never echoed
  s = ingest_one(kReader);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("IngestOne requires scope 'write'; this token has scope 'read'"));
  s = ingest_stream(kReader);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(samples(), 0u);  // nothing refused was applied
  EXPECT_TRUE(ingest_one(kWriter).ok());
  EXPECT_TRUE(ingest_stream(kWriter).ok());
  EXPECT_TRUE(ingest_one(kAdmin).ok());
  EXPECT_EQ(samples(), 3u);

  // Queries: read is enough, nothing is not.
  EXPECT_TRUE(List(channel, kReader).ok());
  EXPECT_EQ(List(channel).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto query = v1::QueryService::NewStub(channel);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + kReader);
    v1::CountsRequest req;
    req.set_model("m");
    v1::CountsResponse resp;
    // Authorized: the model's own answer (no view yet), not an auth error.
    EXPECT_EQ(query->GetCounts(&ctx, req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  // Delete: admin only.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + kWriter);
    v1::DeleteModelRequest req;
    req.set_name("m");
    v1::DeleteModelResponse resp;
    EXPECT_EQ(models->DeleteModel(&ctx, req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // Health checking stays open (no token; generic call: Debian ships no health stubs).
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  grpc::Slice empty("");  // HealthCheckRequest{service: ""} encodes to zero bytes
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status hs;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status status) {
                      std::lock_guard<std::mutex> lock(mu);
                      hs = status;
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING (1)
}

TEST_F(SecurityTest, TlsAndTokensTogether) {
  Pki pki(dir_);
  ASSERT_TRUE(HavePki(pki)) << "openssl failed: " << pki.error();
  service::SecurityOptions sec;
  sec.tls_cert = pki.path("server.pem");
  sec.tls_key = pki.path("server.key");
  sec.auth_tokens = WriteTokens(kReader + " read\n");
  ASSERT_TRUE(Start(sec).ok());
  EXPECT_TRUE(List(Tls(pki, false), kReader).ok());
  EXPECT_EQ(List(Tls(pki, false)).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(TokenFileTest, ParsesScopesCommentsAndLevels) {
  auto auth = service::TokenAuthenticator::Parse(
      "# comment\n\n" + kAdmin + " admin\n" + kWriter + "\tread,write\n" + kReader + " read # trailing\n", "t");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(auth->size(), 3u);
  EXPECT_EQ(auth->Lookup(kAdmin), service::Scope::kAdmin);
  EXPECT_EQ(auth->Lookup(kWriter), service::Scope::kWrite);
  EXPECT_EQ(auth->Lookup(kReader), service::Scope::kRead);
  EXPECT_EQ(auth->Lookup(kReader.substr(0, kReader.size() - 1)), service::Scope::kNone);  // prefix
  EXPECT_EQ(auth->Lookup(kReader + "x"), service::Scope::kNone);                          // extension
  EXPECT_EQ(auth->Lookup(""), service::Scope::kNone);
  EXPECT_TRUE(auth->Check("Bearer " + kAdmin, true, service::Scope::kWrite, "Ingest").ok());    // admin implies write
  EXPECT_TRUE(auth->Check("Bearer " + kWriter, true, service::Scope::kRead, "GetModel").ok());  // write implies read
  EXPECT_EQ(auth->Check("Basic abc", true, service::Scope::kRead, "GetModel").code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(TokenFileTest, ErrorsNameFileAndLine) {
  auto bad = service::TokenAuthenticator::Parse(kAdmin + " admin\n" + kReader + " root\n", "tokens.txt");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tokens.txt:2: unknown scope 'root'"));
  bad = service::TokenAuthenticator::Parse("short admin\n", "f");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("f:1: token of 5 characters, expected 16.."));
  bad = service::TokenAuthenticator::Parse(kAdmin + " admin\n" + kAdmin + " read\n", "f");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("f:2: the token is listed twice"));
  bad = service::TokenAuthenticator::Parse(kAdmin + "\n", "f");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("f:1: expected 'TOKEN SCOPES'"));
  bad = service::TokenAuthenticator::Parse("# nothing\n", "f");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no tokens"));
}

TEST(TokenFileTest, WorldReadableFileWarns) {
  const fs::path p = fs::temp_directory_path() / ("cmestream-tokens-" + std::to_string(::getpid()));
  std::ofstream(p) << kAdmin << " admin\n";
  ::chmod(p.c_str(), 0644);
  std::string warning;
  ASSERT_TRUE(service::TokenAuthenticator::Load(p.string(), &warning).ok());
  EXPECT_THAT(warning, HasSubstr("readable by every user (mode 644)"));
  ::chmod(p.c_str(), 0600);
  warning.clear();
  ASSERT_TRUE(service::TokenAuthenticator::Load(p.string(), &warning).ok());
  EXPECT_EQ(warning, "");
  fs::remove(p);
}

TEST(SecurityFlagsTest, ParsedAndNoticeSaysPlaintext) {
  auto f = service::ParseFlags(
      {"--tls-cert", "c.pem", "--tls-key=k.pem", "--tls-client-ca", "ca.pem", "--auth-tokens", "t"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.security.tls_cert, "c.pem");
  EXPECT_EQ(f->options.security.tls_key, "k.pem");
  EXPECT_EQ(f->options.security.tls_client_ca, "ca.pem");
  EXPECT_EQ(f->options.security.auth_tokens, "t");
  auto bad = service::ParseFlags({"--tls-client-ca", "ca.pem"});
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--tls-client-ca needs TLS"));
  service::SecurityOptions plain;
  EXPECT_THAT(service::TransportNotice(plain, "0.0.0.0", "0.0.0.0:50051"),
              HasSubstr("serving plaintext on 0.0.0.0:50051: not a loopback address"));
  EXPECT_THAT(service::TransportNotice(plain, "127.0.0.1", "127.0.0.1:50051"), HasSubstr("loopback only"));
  EXPECT_TRUE(service::IsLoopbackHost("[::1]"));
  EXPECT_FALSE(service::IsLoopbackHost("10.0.0.1"));
}

}  // namespace
}  // namespace cmestream
