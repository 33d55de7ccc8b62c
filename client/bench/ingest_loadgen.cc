// End-to-end ingest load generator: streams N random pairs of dimension d to a running
// cmestreamd over one Ingest stream with B pairs per message, and reports pairs/s.
//
// usage: cmestream_ingest_loadgen --server HOST:PORT --model NAME [--create] [--n N] [--dim D]
//            [--batch B] [--producer ID] [--sigma S] [--epsilon EPS] [--max-dict M]
// With --create the model is created first (fixed sigma, so no warm-up buffering). The pairs
// are generated before the clock starts; the timed part is the stream from the first Write to
// the last ack, i.e. serialization, transport and the daemon's validation and learning.
// Results go to stdout as one line: "pairs=N dim=D batch=B seconds=T pairs_per_s=R ...".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/cpp/client.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr, "cmestream_ingest_loadgen: %s\n", msg);
  std::fprintf(stderr,
               "usage: cmestream_ingest_loadgen --server HOST:PORT --model NAME [--create] "
               "[--n N] [--dim D] [--batch B] [--producer ID] [--sigma S] [--epsilon EPS] "
               "[--max-dict M]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string server = "127.0.0.1:50051", model, producer;
  bool create = false;
  uint64_t n = 1000000, dim = 2, batch = 1000, max_dict = 0;
  double sigma = 0.5, epsilon = 0;
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
    else if (a == "--sigma") ok = absl::SimpleAtod(next(), &sigma);
    else if (a == "--epsilon") ok = absl::SimpleAtod(next(), &epsilon);
    else return Usage(("unknown option " + a).c_str());
    if (!ok) return Usage(("bad value for " + a).c_str());
  }
  if (model.empty()) return Usage("--model is required");
  if (n == 0 || dim == 0 || batch == 0 || batch > 1000000) return Usage("n, dim, batch must be >= 1");

  cmestream::client::ClientOptions options;
  options.target = server;
  auto client = cmestream::client::Client::Connect(options);
  if (!client.ok()) return Usage(std::string(client.status().message()).c_str());
  if (create) {
    cmestream::v1::ModelConfig config;
    config.set_name(model);
    config.set_dim(static_cast<uint32_t>(dim));
    config.set_sigma(sigma);
    if (epsilon > 0) config.set_epsilon(epsilon);
    if (max_dict > 0) config.set_max_dict(static_cast<uint32_t>(max_dict));
    auto info = (*client)->CreateModel(config);
    if (!info.ok()) {
      std::fprintf(stderr, "create: %s\n", std::string(info.status().ToString()).c_str());
      return 1;
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
  cmestream::client::IngestStream::Options so;
  so.producer_id = producer;
  so.batch_pairs = static_cast<int>(batch);
  const auto start = std::chrono::steady_clock::now();
  auto stream = (*client)->OpenIngest(model, static_cast<uint32_t>(dim), so);
  if (!stream.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(stream.status().ToString()).c_str());
    return 1;
  }
  if (auto s = (*stream)->AddPairs(x, y); !s.ok()) {
    std::fprintf(stderr, "ingest: %s\n", std::string(s.ToString()).c_str());
    return 1;
  }
  auto summary = (*stream)->Finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!summary.ok()) {
    std::fprintf(stderr, "ingest: %s\n", std::string(summary.status().ToString()).c_str());
    return 1;
  }
  auto info = (*client)->Describe(model);
  std::printf("pairs=%llu dim=%llu batch=%llu seconds=%.3f pairs_per_s=%.0f applied=%llu "
              "dictionary=%u\n",
              static_cast<unsigned long long>(summary->pairs_sent),
              static_cast<unsigned long long>(dim), static_cast<unsigned long long>(batch), seconds,
              summary->pairs_sent / seconds, static_cast<unsigned long long>(summary->pairs_applied),
              info.ok() ? info->dictionary_size() : 0u);
  return 0;
}
