// `cmestream ingest` (streams transitions from CSV) and `cmestream producer`.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/context.h"
#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cli/output.h"
#include "client/cpp/client.h"

namespace cmestream::cli {
namespace {

// Progress line on stderr, at most once a second, only after the first second (short files
// stay silent).
class ProgressReporter {
 public:
  explicit ProgressReporter(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO)) {}
  void Maybe(const IngestStream::Summary& s) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double elapsed = Seconds();
    // The rate counts acknowledged pairs: sending can run ahead of the daemon by whatever
    // gRPC flow control buffers.
    std::fprintf(stderr, "%singest: %llu pairs sent, %llu acknowledged (%llu applied), %.0f pairs/s%s",
                 tty_ ? "\r" : "", static_cast<unsigned long long>(s.pairs_sent),
                 static_cast<unsigned long long>(s.pairs_acked), static_cast<unsigned long long>(s.pairs_applied),
                 elapsed > 0 ? s.pairs_acked / elapsed : 0.0, tty_ ? "" : "\n");
    printed_ = true;
  }
  void Done() {
    if (printed_ && tty_) std::fputc('\n', stderr);
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_, tty_;
  bool printed_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = Clock::now();
};

void PrintIngestSummary(const Args& args, const std::string& model, const IngestStream::Options& options,
                        const IngestStream::Summary& summary, double seconds);

// Closes the stream and prints its summary; returns the command's exit code.
int FinishIngest(IngestStream& stream, ProgressReporter& progress, const Args& args, const std::string& model,
                 const IngestStream::Options& options) {
  auto summary = stream.Finish();
  progress.Done();
  if (!summary.ok()) return Fail("ingest", summary.status());
  PrintIngestSummary(args, model, options, *summary, progress.Seconds());
  return 0;
}

// Discrete models: rows of integer state ids, `i,j` pairs or (--trajectory) one id per line.
// The whole input (standard input too) is read and checked for integers before anything is
// sent; the daemon checks the range [0, P) and refuses a batch with an id outside it, naming
// the id, without applying any of that batch.
int IngestIds(Context& ctx, const Args& args, const std::string& model, const std::string& csv, bool trajectory,
              const IngestStream::Options& options, uint32_t num_states) {
  const std::string cmd = "ingest";
  const int columns = trajectory ? 1 : 2;
  const std::string expected = trajectory ? absl::StrCat("one state id in [0, ", num_states, ")")
                                          : absl::StrCat("i,j with state ids in [0, ", num_states, ")");
  auto rows = ReadIdCsvFile(csv, columns, expected);
  if (!rows.ok()) return FailUsage(cmd, rows.status().message());
  if (options.start_offset > 0) {  // --resume: drop what the daemon already applied
    const size_t skip = std::min<size_t>(options.start_offset, rows->size() / columns);
    rows->erase(rows->begin(), rows->begin() + static_cast<std::ptrdiff_t>(skip * columns));
  }
  auto stream = ctx.client->OpenDiscreteIngest(model, options);
  if (!stream.ok()) return Fail(cmd, stream.status());
  ProgressReporter progress(!args.Has("quiet"));
  const size_t chunk = static_cast<size_t>(options.batch_pairs);
  if (trajectory) {
    for (size_t i = 0; i < rows->size(); i += chunk) {
      const size_t n = std::min(chunk, rows->size() - i);
      if (auto s = (*stream)->AddStateIds(absl::MakeConstSpan(rows->data() + i, n)); !s.ok()) {
        return Fail(cmd, s);
      }
      progress.Maybe((*stream)->Progress());
    }
  } else {
    std::vector<int64_t> x, y;
    const size_t total = rows->size() / 2;
    for (size_t i = 0; i < total; i += chunk) {
      const size_t n = std::min(chunk, total - i);
      x.resize(n);
      y.resize(n);
      for (size_t k = 0; k < n; ++k) {
        x[k] = (*rows)[2 * (i + k)];
        y[k] = (*rows)[2 * (i + k) + 1];
      }
      if (auto s = (*stream)->AddIdPairs(x, y); !s.ok()) return Fail(cmd, s);
      progress.Maybe((*stream)->Progress());
    }
  }
  return FinishIngest(**stream, progress, args, model, options);
}

}  // namespace

int Ingest(Context& ctx, const Args& args) {
  const std::string cmd = "ingest";
  if (int rc = NeedName(args, cmd, kIngestUsage)) return rc;
  const std::string model = args.positional[0];
  auto csv = args.Value("csv");
  if (!csv) return FailUsage(cmd, "--csv FILE is required ('-' for standard input)");
  const bool trajectory = args.Has("trajectory");
  IngestStream::Options options;
  options.producer_id = args.Value("producer").value_or("");
  options.episode_id = args.Value("episode").value_or(*csv == "-" ? "stdin" : *csv);
  if (auto b = args.Value("batch")) {
    auto v = ParseUint("batch", *b);
    if (!v.ok()) return FailUsage(cmd, v.status().message());
    if (*v < 1 || *v > 1000000) return FailUsage(cmd, "--batch: expected in [1, 1000000]");
    options.batch_pairs = static_cast<int>(*v);
  }
  if (int rc = NeedClient(ctx, cmd)) return rc;
  // The model's dimension fixes the column count (and an unknown model fails before any
  // input is read).
  auto info = ctx.client->Describe(model);
  if (!info.ok()) return Fail(cmd, info.status());
  if (args.Has("resume")) {
    if (options.producer_id.empty()) return FailUsage(cmd, "--resume needs --producer ID");
    auto producer = ctx.client->GetProducer(model, options.producer_id);
    if (!producer.ok()) return Fail(cmd, producer.status());
    options.start_offset = producer->applied_offset();
    if (!args.Has("quiet") && !args.Has("json")) {
      std::fprintf(stderr, "ingest: resuming producer '%s' at offset %llu\n", options.producer_id.c_str(),
                   static_cast<unsigned long long>(options.start_offset));
    }
  }
  if (info->config().num_states() > 0) {
    return IngestIds(ctx, args, model, *csv, trajectory, options, info->config().num_states());
  }
  const int d = static_cast<int>(info->config().dim());
  const int columns = trajectory ? d : 2 * d;
  const std::string expected =
      trajectory ? absl::StrCat("one state x_1..x_", d) : absl::StrCat("x_1..x_", d, ",y_1..y_", d);

  // A file is read and validated whole before the stream opens: a bad line then sends nothing.
  // Trajectories: a blank line marks a gap (a dropped sample), sent as IngestBatch.gap.
  std::vector<double> all;
  std::vector<size_t> gaps;  // rows after a gap, ascending (file: of `all`; stdin: of the stream)
  std::vector<size_t>* gaps_out = trajectory ? &gaps : nullptr;
  std::ifstream file;
  std::unique_ptr<CsvReader> reader;
  if (*csv != "-") {
    auto rows = ReadCsvFile(*csv, columns, expected, gaps_out);
    if (!rows.ok()) return FailUsage(cmd, rows.status().message());
    all = std::move(*rows);
    if (options.start_offset > 0 && !gaps.empty()) {
      // An offset counts pairs, and a gap drops one: the rows to skip are not the offset.
      return FailUsage(cmd, absl::StrCat(*csv,
                                         " has gaps (blank lines), which --resume cannot count: re-run without "
                                         "--resume (the producer's offsets still apply every pair exactly once)"));
    }
    if (options.start_offset > 0) {  // --resume: pairs (or states) before the offset are applied
      const size_t skip = std::min<size_t>(options.start_offset, all.size() / columns);
      all.erase(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(skip * columns));
      std::vector<size_t> kept;
      for (size_t g : gaps)
        if (g > skip) kept.push_back(g - skip);
      gaps.swap(kept);
    }
  } else {
    // std::cin is synchronized with stdio (slow line by line); read the descriptor directly.
    file.open("/dev/stdin");
    if (!file) return FailUsage(cmd, "cannot open standard input");
    reader = std::make_unique<CsvReader>(&file, "-", columns, expected);
    reader->set_gaps(gaps_out);
    if (options.start_offset > 0) {  // --resume on standard input: read past the applied rows
      std::vector<double> discard;
      auto n = reader->ReadRows(static_cast<size_t>(options.start_offset), &discard);
      if (!n.ok()) return FailUsage(cmd, n.status().message());
      if (!gaps.empty()) {
        return FailUsage(cmd,
                         "standard input has gaps (blank lines) before the resume offset, which --resume "
                         "cannot count: re-run without --resume (the producer's offsets still apply every pair "
                         "exactly once)");
      }
    }
  }

  auto stream = ctx.client->OpenIngest(model, static_cast<uint32_t>(d), options);
  if (!stream.ok()) return Fail(cmd, stream.status());
  ProgressReporter progress(!args.Has("quiet"));
  std::vector<double> x, y, chunk;
  const size_t chunk_rows = static_cast<size_t>(options.batch_pairs);
  size_t rows_sent = 0, next_gap = 0;  // trajectory rows handed to the stream; gaps[next_gap] ahead
  auto send_rows = [&](const double* rows, size_t n) -> absl::Status {
    if (trajectory) {
      // Split at the gaps inside these rows: Gap() before the row that follows one.
      size_t i = 0;
      while (i < n) {
        while (next_gap < gaps.size() && gaps[next_gap] < rows_sent + i) ++next_gap;
        if (next_gap < gaps.size() && gaps[next_gap] == rows_sent + i && i + rows_sent > 0) {
          if (auto s = (*stream)->Gap(); !s.ok()) return s;
          ++next_gap;
        }
        const size_t end = next_gap < gaps.size() && gaps[next_gap] < rows_sent + n ? gaps[next_gap] - rows_sent : n;
        if (auto s = (*stream)->AddStates(absl::MakeConstSpan(rows + i * d, (end - i) * d)); !s.ok()) return s;
        i = end;
      }
      rows_sent += n;
      return absl::OkStatus();
    }
    x.resize(n * d);
    y.resize(n * d);
    for (size_t i = 0; i < n; ++i) {
      std::copy(rows + i * columns, rows + i * columns + d, x.begin() + i * d);
      std::copy(rows + i * columns + d, rows + (i + 1) * columns, y.begin() + i * d);
    }
    return (*stream)->AddPairs(x, y);
  };
  if (!reader) {
    const size_t total = all.size() / columns;
    for (size_t i = 0; i < total; i += chunk_rows) {
      const size_t n = std::min(chunk_rows, total - i);
      if (auto s = send_rows(all.data() + i * columns, n); !s.ok()) return Fail(cmd, s);
      progress.Maybe((*stream)->Progress());
    }
  } else {
    while (true) {
      chunk.clear();
      auto n = reader->ReadRows(chunk_rows, &chunk);
      if (!n.ok()) {
        // Send nothing of the bad chunk; what was sent before stays applied.
        const auto sent = (*stream)->Progress().pairs_sent;
        auto done = (*stream)->Finish();
        progress.Done();
        const uint64_t applied = done.ok() ? done->pairs_applied : 0;
        return FailUsage(cmd, absl::StrCat(n.status().message(), " (", sent, " pairs sent before this line, ", applied,
                                           " applied)"));
      }
      if (*n == 0) break;
      if (auto s = send_rows(chunk.data(), *n); !s.ok()) return Fail(cmd, s);
      progress.Maybe((*stream)->Progress());
    }
  }
  return FinishIngest(**stream, progress, args, model, options);
}

namespace {

void PrintIngestSummary(const Args& args, const std::string& model, const IngestStream::Options& options,
                        const IngestStream::Summary& s, double seconds) {
  const IngestStream::Summary* summary = &s;
  const double rate = seconds > 0 ? summary->pairs_sent / seconds : 0;
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    w.Key("producer").String(options.producer_id);
    w.Key("batches").Uint(summary->batches_sent);
    w.Key("pairs_sent").Uint(summary->pairs_sent);
    w.Key("pairs_applied").Uint(summary->pairs_applied);
    w.Key("producer_offset").Uint(summary->producer_offset);
    w.Key("model_samples").Uint(summary->model_samples);
    w.Key("seconds").Double(seconds);
    w.Key("pairs_per_second").Double(rate);
    w.EndObject();
    PrintJson(w);
  } else {
    std::cout << "ingested " << summary->pairs_sent << " pairs into '" << model << "' in " << summary->batches_sent
              << " batches: " << summary->pairs_applied << " applied";
    if (summary->pairs_applied < summary->pairs_sent) {
      std::cout << ", " << summary->pairs_sent - summary->pairs_applied << " already applied for producer '"
                << options.producer_id << "'";
    }
    if (!options.producer_id.empty()) {
      std::cout << "; producer offset " << summary->producer_offset;
    }
    std::cout << "; model samples " << summary->model_samples << "; " << Num(seconds) << " s (" << Num(rate)
              << " pairs/s)\n";
  }
}

}  // namespace

int Producer(Context& ctx, const Args& args) {
  const std::string cmd = "producer";
  if (int rc = NeedName(args, cmd, kProducerUsage)) return rc;
  auto id = args.Value("producer");
  if (!id) return FailUsage(cmd, "--producer ID is required");
  if (int rc = NeedClient(ctx, cmd)) return rc;
  auto r = ctx.client->GetProducer(args.positional[0], *id);
  if (!r.ok()) return Fail(cmd, r.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject().Key("model").String(r->model()).Key("producer").String(r->producer_id());
    w.Key("applied_offset").Uint(r->applied_offset()).EndObject();
    PrintJson(w);
  } else {
    std::cout << "producer '" << r->producer_id() << "' of '" << r->model() << "': applied offset "
              << r->applied_offset() << "\n";
  }
  return 0;
}

}  // namespace cmestream::cli
