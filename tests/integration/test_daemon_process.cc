// The built cmestreamd binary as a user runs it: flags, the machine-readable listening line,
// gRPC (incl. the health service), /metrics over HTTP, the data-dir lock, and a clean exit 0
// on SIGTERM.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_test_util.h"

#ifndef CMESTREAMD_PATH
#error "CMESTREAMD_PATH must name the built cmestreamd binary"
#endif

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;

// A spawned cmestreamd with its stdout on a pipe.
struct Process {
  pid_t pid = -1;
  FILE* out = nullptr;

  static Process Spawn(const std::vector<std::string>& args) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    Process p;
    p.pid = ::fork();
    if (p.pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      std::string bin = CMESTREAMD_PATH;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    p.out = ::fdopen(fds[0], "r");
    return p;
  }
  std::string ReadLine() {
    char buf[512];
    return std::fgets(buf, sizeof(buf), out) ? std::string(buf) : std::string();
  }
  // Exit status, or -1 if it did not exit within `seconds`.
  int WaitExit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  ~Process() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out) std::fclose(out);
  }
};

TEST(DaemonProcessTest, ServesOnPortZeroAndExitsCleanlyOnSigterm) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cmestreamd-proc-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Process d = Process::Spawn({"--listen", "127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--data-dir", dir.string(),
                              "--refresh-interval", "0.2"});
  const std::string line = d.ReadLine();
  std::smatch m;
  const std::regex format(R"(^cmestreamd listening grpc=127\.0\.0\.1:(\d+) metrics=127\.0\.0\.1:(\d+)\n$)");
  ASSERT_TRUE(std::regex_match(line, m, format)) << "line: '" << line << "'";
  const int grpc_port = std::stoi(m[1]), metrics_port = std::stoi(m[2]);
  EXPECT_GT(grpc_port, 0);
  EXPECT_GT(metrics_port, 0);
  EXPECT_TRUE(std::filesystem::exists(dir / "daemon.json"));

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials());
  auto models = v1::ModelService::NewStub(channel);
  auto ingest = v1::IngestService::NewStub(channel);
  {
    grpc::ClientContext ctx;
    v1::CreateModelRequest req;
    req.mutable_config()->set_name("proc");
    req.mutable_config()->set_dim(1);
    req.mutable_config()->set_sigma(0.5);
    v1::ModelInfo info;
    ASSERT_TRUE(models->CreateModel(&ctx, req, &info).ok());
    EXPECT_DOUBLE_EQ(info.config().refresh_interval_seconds(), 0.2);  // from --refresh-interval
  }
  {
    grpc::ClientContext ctx;
    v1::IngestBatch b;
    b.set_model("proc");
    for (int i = 0; i < 20; ++i) b.add_states(std::sin(0.3 * i));
    v1::IngestAck ack;
    ASSERT_TRUE(ingest->IngestOne(&ctx, b, &ack).ok());
    EXPECT_EQ(ack.model_samples(), 19u);
  }
  // The scheduler refreshes on its own within the 0.2 s interval.
  v1::ModelInfo info;
  for (int attempt = 0; attempt < 100 && info.view().version() == 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name("proc");
    ASSERT_TRUE(models->GetModel(&ctx, req, &info).ok());
  }
  EXPECT_EQ(info.view().version(), 1u);
  EXPECT_EQ(info.view().samples(), 19u);

  // The health service answers SERVING for the whole server ("").
  {
    grpc::GenericStub generic(channel);
    grpc::ClientContext ctx;
    grpc::Slice empty("");  // HealthCheckRequest{service: ""} encodes to zero bytes
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    grpc::Status s;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                      [&](grpc::Status status) {
                        std::lock_guard<std::mutex> lock(mu);
                        s = status;
                        done = true;
                        cv.notify_all();
                      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(response.Dump(&slices).ok());
    std::string bytes;
    for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING (1)
  }

  const std::string metrics = testing::HttpGet(metrics_port, "/metrics");
  EXPECT_NE(metrics.find("cmestream_samples_ingested_total{model=\"proc\"} 19"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("cmestream_models{state=\"live\"} 1"), std::string::npos);

  // A second daemon on the same data dir refuses to start.
  {
    Process second =
        Process::Spawn({"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", dir.string()});
    EXPECT_EQ(second.WaitExit(20), 1);
  }
  // Bad flags: exit 2.
  {
    Process bad = Process::Spawn({"--refresh-interval", "-1", "--data-dir", dir.string()});
    EXPECT_EQ(bad.WaitExit(20), 2);
  }

  ASSERT_EQ(::kill(d.pid, SIGTERM), 0);
  EXPECT_EQ(d.WaitExit(20), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "daemon.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cmestream
