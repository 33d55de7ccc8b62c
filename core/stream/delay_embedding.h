// Delay embedding of a trajectory stream (docs/algorithms.md §1.14): a scalar or few-channel
// sensor seen through its last D observations, S rows apart, so the state the estimators learn
// on is the window
//
//     w_t = [x_{t-(D-1)S}, ..., x_{t-S}, x_t]        (C channels each, oldest first: C*D values)
//
// and a pair is (w_t, w_{t+1}). The embedding keeps the open episode's last (D-1)S+1 rows, so a
// window can span batches (and, being serialized with the learner, a restart); a window never
// spans two episodes.
//
// EPISODES follow the learner's episode rule (streaming_learner.h): a trajectory batch continues
// the open episode iff it has the same episode key (producer, episode), is not marked as a gap,
// and starts with the last row kept (the client repeats it). Otherwise the episode starts anew
// and its first (D-1)S rows only fill the window.
//
// COST: O(rows * C * D) copies per batch; no allocation once the output buffer has grown to the
// largest batch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/fwd.h"

namespace cmestream {

class DelayEmbedding {
 public:
  struct Options {
    int channels = 1;  // C, values per raw row
    int delays = 1;    // D, rows per window (1: no embedding)
    int stride = 1;    // S, rows between consecutive entries of a window

    int span() const { return (delays - 1) * stride + 1; }  // rows a window covers
    int window_dim() const { return channels * delays; }
    // InvalidArgument naming the field: channels >= 1, 1 <= delays <= kMaxDelays,
    // 1 <= stride <= kMaxStride.
    absl::Status Validate() const;
  };
  static constexpr int kMaxDelays = 512;
  static constexpr int kMaxStride = 1000;

  // requires: options.Validate().ok().
  explicit DelayEmbedding(const Options& options);

  // Takes the n_rows raw rows of one trajectory batch (row-major, channels each; finite, checked
  // by the caller) and writes the windows that end at its rows into `windows` (row-major,
  // window_dim() each; grown when too small, never shrunk). When the batch continues the open
  // episode, the first window written is the one ending at the repeated row (the previous
  // batch's last window), so consecutive windows continue the learner's episode as well.
  // Returns the number of windows written; *started: the windows written do not continue the
  // previous batch's (a new episode, or one whose first window this batch completes).
  int64_t Append(const double* rows, int64_t n_rows, std::string_view producer, std::string_view episode, bool gap,
                 std::vector<double>& windows, bool* started);

  // The windows of n_rows consecutive rows, without state (query points, series): n_rows -
  // span() + 1 of them (0 when fewer rows), window i ending at row i + span() - 1. `out` holds
  // that many windows of window_dim() values.
  static int64_t WindowsOf(const Options& options, const double* rows, int64_t n_rows, double* out);
  static int64_t NumWindows(const Options& options, int64_t n_rows) {
    return n_rows >= options.span() ? n_rows - options.span() + 1 : 0;
  }

  const Options& options() const { return options_; }
  int64_t rows_kept() const { return filled_; }

  // The open episode: bool open, string producer, string episode, i64 rows kept, then the rows
  // kept, oldest first (part of the learner state from version 7).
  void Serialize(io::Writer& w) const;
  absl::Status Deserialize(io::Reader& r);

 private:
  void Push(const double* row);
  // The window ending at the newest row kept. requires: filled_ >= span().
  void WriteWindow(double* out) const;
  const double* Row(int64_t back) const;  // the row `back` rows before the newest (0: newest)

  Options options_;
  std::vector<double> ring_;  // span() rows of C values, circular
  int64_t filled_ = 0;        // rows kept, <= span()
  int64_t newest_ = -1;       // ring slot of the newest row
  bool open_ = false;
  std::string producer_, episode_;
};

}  // namespace cmestream
