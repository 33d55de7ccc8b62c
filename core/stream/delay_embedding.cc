#include "core/stream/delay_embedding.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"

namespace cmestream {

absl::Status DelayEmbedding::Options::Validate() const {
  if (channels < 1) return absl::InvalidArgumentError(absl::StrCat("channels is ", channels, ", expected >= 1"));
  if (delays < 1 || delays > kMaxDelays) {
    return absl::InvalidArgumentError(absl::StrCat("delays is ", delays, ", expected 1..", kMaxDelays));
  }
  if (stride < 1 || stride > kMaxStride) {
    return absl::InvalidArgumentError(absl::StrCat("delay stride is ", stride, ", expected 1..", kMaxStride));
  }
  return absl::OkStatus();
}

DelayEmbedding::DelayEmbedding(const Options& options)
    : options_(options), ring_(static_cast<size_t>(options.span()) * options.channels, 0.0) {}

const double* DelayEmbedding::Row(int64_t back) const {
  const int64_t span = options_.span();
  const int64_t slot = ((newest_ - back) % span + span) % span;
  return ring_.data() + slot * options_.channels;
}

void DelayEmbedding::Push(const double* row) {
  newest_ = (newest_ + 1) % options_.span();
  std::memcpy(ring_.data() + newest_ * options_.channels, row, sizeof(double) * options_.channels);
  filled_ = std::min<int64_t>(filled_ + 1, options_.span());
}

void DelayEmbedding::WriteWindow(double* out) const {
  const int c = options_.channels;
  // Entry k (oldest first) is the row (D-1-k) S rows before the newest.
  for (int k = 0; k < options_.delays; ++k) {
    std::memcpy(out + static_cast<int64_t>(k) * c, Row(static_cast<int64_t>(options_.delays - 1 - k) * options_.stride),
                sizeof(double) * c);
  }
}

int64_t DelayEmbedding::Append(const double* rows, int64_t n_rows, std::string_view producer, std::string_view episode,
                               bool gap, std::vector<double>& windows, bool* started) {
  const int c = options_.channels;
  const int64_t w = options_.window_dim();
  bool continues = open_ && !gap && n_rows > 0 && filled_ > 0 && producer == producer_ && episode == episode_;
  if (continues) continues = std::memcmp(rows, Row(0), sizeof(double) * c) == 0;
  // The windows continue the previous ones only if the episode continues and had one already.
  *started = !(continues && filled_ >= options_.span());
  if (windows.size() < static_cast<size_t>(n_rows * w)) windows.resize(static_cast<size_t>(n_rows * w));
  int64_t written = 0;
  int64_t first = 0;
  if (continues) {
    if (filled_ >= options_.span()) WriteWindow(windows.data() + w * written++);
    first = 1;  // the repeated row is kept already
  } else {
    filled_ = 0;
    newest_ = -1;
  }
  for (int64_t i = first; i < n_rows; ++i) {
    Push(rows + i * c);
    if (filled_ >= options_.span()) WriteWindow(windows.data() + w * written++);
  }
  if (n_rows > 0) {
    // Assigned only when different: the key's strings are not reallocated batch after batch.
    if (producer_ != producer) producer_.assign(producer);
    if (episode_ != episode) episode_.assign(episode);
    open_ = true;
  }
  return written;
}

int64_t DelayEmbedding::WindowsOf(const Options& options, const double* rows, int64_t n_rows, double* out) {
  const int64_t n = NumWindows(options, n_rows);
  const int c = options.channels;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < options.delays; ++k) {
      std::memcpy(out + (i * options.delays + k) * c, rows + (i + static_cast<int64_t>(k) * options.stride) * c,
                  sizeof(double) * c);
    }
  }
  return n;
}

void DelayEmbedding::Serialize(io::Writer& w) const {
  w.Bool(open_);
  w.String(producer_);
  w.String(episode_);
  w.I64(filled_);
  for (int64_t back = filled_ - 1; back >= 0; --back) w.Doubles(Row(back), options_.channels);
}

absl::Status DelayEmbedding::Deserialize(io::Reader& r) {
  const bool open = r.Bool("model delay window open");
  std::string producer = r.String("model delay window producer", 1 << 16);
  std::string episode = r.String("model delay window episode", 1 << 16);
  const int64_t filled = r.Count("model delay window rows", 0, options_.span());
  if (!r.ok()) return r.status();
  filled_ = 0;
  newest_ = -1;
  std::vector<double> row(static_cast<size_t>(options_.channels));
  for (int64_t i = 0; i < filled; ++i) {
    if (!r.Doubles("model delay window row", options_.channels, row.data())) return r.status();
    Push(row.data());
  }
  open_ = open;
  producer_ = std::move(producer);
  episode_ = std::move(episode);
  return absl::OkStatus();
}

}  // namespace cmestream
