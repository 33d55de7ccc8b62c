// Strict CSV reader of numeric rows for the `cmestream` tool.
//
// CsvReader represents a cursor over a text stream in which every data line holds exactly
// `columns` comma-separated finite numbers. Blank lines and lines whose first non-blank
// character is '#' are skipped (so files may carry a commented header, as `cmestream simulate`
// writes). Fields may be surrounded by spaces or tabs; CRLF line ends are accepted.
//
// Errors name the source and line ("data.csv:17: expected 4 comma-separated numbers
// (x_1..x_2,y_1..y_2), got 3 fields") so that a user can fix the file; a malformed line is
// never partially consumed into the output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cmestream::cli {

// Parses one data line into out[0..columns). requires: out has room for `columns` doubles.
// Returns InvalidArgument without a location prefix ("expected ..., got ..."); the caller adds it.
absl::Status ParseCsvLine(std::string_view line, int columns, std::string_view expected, double* out);

// True for lines the reader skips: empty/blank or a '#' comment.
bool IsSkippableLine(std::string_view line);

class CsvReader {
 public:
  // in: not owned, must outlive the reader. name: shown in errors ("-" shows as "<stdin>").
  // columns >= 1. expected: human description of a row, e.g. "x_1..x_2,y_1..y_2".
  CsvReader(std::istream* in, std::string name, int columns, std::string expected);

  // Appends up to max_rows rows (row-major, `columns` doubles each) to *out.
  // ensures: returns the number of rows appended; 0 means end of input. On error *out keeps
  // only the rows of earlier lines.
  absl::StatusOr<size_t> ReadRows(size_t max_rows, std::vector<double>* out);

  // 1-based number of the last line read.
  int64_t line_number() const { return line_number_; }

  // With gaps set, a run of blank lines between two data rows appends to *gaps the index (over
  // every row this reader returned) of the row after it: a trajectory's gap marker (a dropped
  // sample; `cmestream ingest --trajectory`). Comment lines mark nothing.
  void set_gaps(std::vector<size_t>* gaps) { gaps_ = gaps; }

 private:
  std::istream* in_;
  std::string name_;
  int columns_;
  std::string expected_;
  std::string line_;
  int64_t line_number_ = 0;
  std::vector<size_t>* gaps_ = nullptr;
  size_t rows_read_ = 0;
};

// Reads a whole file ("-" = stdin) of rows with `columns` numbers each into a row-major vector.
// With gaps: the rows that follow a run of blank lines (CsvReader::set_gaps).
absl::StatusOr<std::vector<double>> ReadCsvFile(const std::string& path, int columns, const std::string& expected,
                                                std::vector<size_t>* gaps = nullptr);

// Integer rows (state ids of discrete models). Like ParseCsvLine, but every field must be a
// decimal integer in the range of int64 ("3", "-1", "+7"; not "3.0", "1e2"): an id is an
// index, so a float that happens to be integral is refused rather than silently truncated.
// The range [0, P) is the daemon's to check (it knows P). requires: out has `columns` slots.
absl::Status ParseIdLine(std::string_view line, int columns, std::string_view expected, int64_t* out);

// Reads a whole file ("-" = stdin, read to its end) of integer rows into a row-major vector.
// Errors name file:line ("ids.csv:3: field 2: '2.5' is not an integer").
absl::StatusOr<std::vector<int64_t>> ReadIdCsvFile(const std::string& path, int columns, const std::string& expected);

}  // namespace cmestream::cli
