// End-to-end ingest load generator: streams N random pairs of dimension d to a running
// cmestreamd over one Ingest stream with B pairs per message, and reports pairs/s.
//
// usage: cmestream_ingest_loadgen --server HOST:PORT --model NAME [--create] [--n N] [--dim D]
//            [--batch B] [--producer ID] [--sigma S|auto] [--epsilon EPS] [--max-dict M] [--reduce K|off]
// With --create the model is created first (fixed sigma, so no warm-up buffering; --sigma auto
// leaves sigma and every other default to the daemon, as `cmestream model create` does: warm-up,
// scaling, alarms, and above 64 dims the input reduction, which --reduce K|off overrides). The pairs
// are generated before the clock starts; the timed part is the stream from the first Write to
// the last ack, i.e. serialization, transport and the daemon's validation and learning.
// Results go to stdout as one line: "pairs=N dim=D batch=B seconds=T pairs_per_s=R ...".
//
// Concurrency: --streams K opens K concurrent Ingest streams (producer ID-k), each
// sending --n pairs, spread round robin over --models M models NAME-0..NAME-(M-1) (M = 1: NAME
// itself); pairs_per_s is then the aggregate (all pairs / wall time of the slowest stream).
// --probe P: while the streams run, another thread calls GetModel and a Koopman query with
// 1000 points (--probe-points) on model P (refreshed once before the clock starts) in a loop
// and the line adds their p50/p99 latencies in ms ("getmodel_p50_ms=... koopman_p99_ms=...").
// Streams refused with RESOURCE_EXHAUSTED are counted (refused=K) rather than fatal.
// --producer-nice N: the producer threads lower their own priority by N (Linux, per thread) and
// the probe uses its own client, so that on one machine the probe measures the daemon rather
// than its CPU contention with 50 producers in the same process (in production producers run
// elsewhere). --probe-seconds S: the probe runs for S seconds (with --streams 0: a probe-only
// process, e.g. beside a load generator run under `nice`).
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/cpp/client.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr, "cmestream_ingest_loadgen: %s\n", msg);
  std::fprintf(stderr,
               "usage: cmestream_ingest_loadgen --server HOST:PORT --model NAME [--create] "
               "[--n N] [--dim D] [--batch B] [--producer ID] [--sigma S|auto] [--epsilon EPS] "
               "[--max-dict M] [--reduce K|off] [--streams K] [--models M] [--probe MODEL] [--probe-points P] "
               "[--producer-nice N] [--probe-seconds S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string server = "127.0.0.1:50051", model, producer;
  bool create = false;
  uint64_t n = 1000000, dim = 2, batch = 1000, max_dict = 0;
  double sigma = 0.5, epsilon = 0;
  int64_t reduce = -1;  // -1: the daemon's default
  uint64_t streams = 1, models = 1, probe_points = 1000, producer_nice = 0;
  double probe_seconds = 0;
  std::string probe;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    bool ok = true;
    if (a == "--server") server = next();
    else if (a == "--model") model = next();
    else if (a == "--producer") producer = next();
    else if (a == "--create") create = true;
    else if (a == "--n") ok = absl::SimpleAtoi(next(), &n);
    else if (a == "--dim") ok = absl::SimpleAtoi(next(), &dim);
    else if (a == "--batch") ok = absl::SimpleAtoi(next(), &batch);
    else if (a == "--max-dict") ok = absl::SimpleAtoi(next(), &max_dict);
    else if (a == "--sigma") {
      const std::string v = next();
      ok = v == "auto" ? (sigma = 0, true) : absl::SimpleAtod(v, &sigma) && sigma > 0;
    } else if (a == "--reduce") {
      const std::string v = next();
      ok = v == "off" ? (reduce = 0, true) : absl::SimpleAtoi(v, &reduce);
    } else if (a == "--epsilon") ok = absl::SimpleAtod(next(), &epsilon);
    else if (a == "--streams") ok = absl::SimpleAtoi(next(), &streams);
    else if (a == "--models") ok = absl::SimpleAtoi(next(), &models);
    else if (a == "--probe") probe = next();
    else if (a == "--probe-points") ok = absl::SimpleAtoi(next(), &probe_points);
    else if (a == "--probe-seconds") ok = absl::SimpleAtod(next(), &probe_seconds) && probe_seconds >= 0;
    else if (a == "--producer-nice") ok = absl::SimpleAtoi(next(), &producer_nice) && producer_nice <= 19;
    else return Usage(("unknown option " + a).c_str());
    if (!ok) return Usage(("bad value for " + a).c_str());
  }
  if (model.empty()) return Usage("--model is required");
  if (n == 0 || dim == 0 || batch == 0 || batch > 1000000) return Usage("n, dim, batch must be >= 1");

  cmestream::client::ClientOptions options;
  options.target = server;
  const bool probe_only = streams == 0 && !probe.empty() && probe_seconds > 0;
  if (!probe_only && (streams == 0 || models == 0 || streams > 1000 || models > streams))
    return Usage("need 1 <= models <= streams <= 1000 (or --streams 0 with --probe and --probe-seconds)");
  auto client = cmestream::client::Client::Connect(options);
  if (!client.ok()) return Usage(std::string(client.status().message()).c_str());
  auto probe_client = cmestream::client::Client::Connect(options);  // the probe's own client
  if (!probe_client.ok()) return Usage(std::string(probe_client.status().message()).c_str());
  auto model_name = [&](uint64_t k) { return models == 1 ? model : model + "-" + std::to_string(k % models); };
  if (create) {
    for (uint64_t k = 0; k < models; ++k) {
      cmestream::v1::ModelConfig config;
      config.set_name(model_name(k));
      config.set_dim(static_cast<uint32_t>(dim));
      if (sigma > 0) config.set_sigma(sigma);
      if (reduce >= 0) config.set_reduce(static_cast<uint32_t>(reduce));
      if (epsilon > 0) config.set_epsilon(epsilon);
      if (max_dict > 0) config.set_max_dict(static_cast<uint32_t>(max_dict));
      auto info = (*client)->CreateModel(config);
      if (!info.ok()) {
        std::fprintf(stderr, "create: %s\n", std::string(info.status().ToString()).c_str());
        return 1;
      }
    }
  }
  // Pairs from a contracting linear map plus noise inside the unit box: the dictionary
  // saturates quickly, so the figure measures the pipeline rather than dictionary growth.
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x(n * dim), y(n * dim);
  for (uint64_t i = 0; i < n * dim; ++i) {
    x[i] = u(rng);
    y[i] = 0.9 * x[i] + 0.05 * u(rng);
  }
  std::vector<double> probe_x(probe_points * dim);
  for (double& v : probe_x) v = u(rng);
  if (!probe.empty()) {
    // A first view, so Koopman answers (a refresh needs samples: feed the probe model a little).
    auto warm = (*client)->OpenIngest(probe, static_cast<uint32_t>(dim), {});
    if (warm.ok()) {
      const size_t k = std::min<uint64_t>(n, 2000) * dim;
      (void)(*warm)->AddPairs(absl::MakeConstSpan(x.data(), k), absl::MakeConstSpan(y.data(), k));
      (void)(*warm)->Finish();
    }
    if (auto v = (*client)->Refresh(probe, true); !v.ok()) {
      std::fprintf(stderr, "probe refresh: %s\n", std::string(v.status().ToString()).c_str());
      return 1;
    }
  }
  std::atomic<uint64_t> sent{0}, applied{0};
  std::atomic<int> refused{0}, failed{0}, running{static_cast<int>(streams)};
  std::vector<double> getmodel_ms, koopman_ms;
  const auto start = std::chrono::steady_clock::now();
  std::thread prober;
  if (!probe.empty()) {
    prober = std::thread([&] {
      auto probing = [&] {
        if (probe_seconds > 0)
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < probe_seconds;
        return running.load() > 0;
      };
      while (probing()) {
        auto t0 = std::chrono::steady_clock::now();
        auto info = (*probe_client)->Describe(probe);
        auto t1 = std::chrono::steady_clock::now();
        auto k = (*probe_client)->Koopman(probe, 0, probe_x);
        auto t2 = std::chrono::steady_clock::now();
        if (info.ok()) getmodel_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (k.ok()) koopman_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  std::vector<std::thread> workers;
  for (uint64_t k = 0; k < streams; ++k) {
    workers.emplace_back([&, k] {
      if (producer_nice > 0) {
        const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
        (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), static_cast<int>(producer_nice));
      }
      cmestream::client::IngestStream::Options so;
      so.producer_id = producer.empty() ? "" : producer + "-" + std::to_string(k);
      so.batch_pairs = static_cast<int>(batch);
      auto stream = (*client)->OpenIngest(model_name(k), static_cast<uint32_t>(dim), so);
      absl::Status s = stream.ok() ? (*stream)->AddPairs(x, y) : stream.status();
      absl::StatusOr<cmestream::client::IngestStream::Summary> summary =
          s.ok() ? (*stream)->Finish() : absl::StatusOr<cmestream::client::IngestStream::Summary>(s);
      if (summary.ok()) {
        sent += summary->pairs_sent;
        applied += summary->pairs_applied;
      } else if (summary.status().code() == absl::StatusCode::kResourceExhausted) {
        ++refused;
      } else {
        ++failed;
        std::fprintf(stderr, "stream %llu: %s\n", static_cast<unsigned long long>(k),
                     std::string(summary.status().ToString()).c_str());
      }
      --running;
    });
  }
  for (auto& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (prober.joinable()) prober.join();
  if (failed.load() > 0) return 1;
  auto pct = [](std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  auto info = (*client)->Describe(model_name(0));
  std::printf(
      "pairs=%llu dim=%llu batch=%llu streams=%llu models=%llu seconds=%.3f pairs_per_s=%.0f applied=%llu "
      "dictionary=%u refused=%d",
      static_cast<unsigned long long>(sent.load()), static_cast<unsigned long long>(dim),
      static_cast<unsigned long long>(batch), static_cast<unsigned long long>(streams),
      static_cast<unsigned long long>(models), seconds, static_cast<double>(sent.load()) / seconds,
      static_cast<unsigned long long>(applied.load()), info.ok() ? info->dictionary_size() : 0u, refused.load());
  if (!probe.empty()) {
    std::printf(" probes=%zu getmodel_p50_ms=%.2f getmodel_p99_ms=%.2f koopman_p50_ms=%.2f koopman_p99_ms=%.2f",
                getmodel_ms.size(), pct(getmodel_ms, 0.5), pct(getmodel_ms, 0.99), pct(koopman_ms, 0.5),
                pct(koopman_ms, 0.99));
  }
  std::printf("\n");
  return 0;
}
