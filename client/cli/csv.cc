#include "client/cli/csv.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"

namespace cmestream::cli {
namespace {

std::string_view Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

std::string Shorten(std::string_view s) {
  if (s.size() <= 40) return std::string(s);
  return std::string(s.substr(0, 37)) + "...";
}

// "field K: 'FIELD' WHAT" (K 1-based, FIELD shortened).
absl::Status FieldError(int k, std::string_view field, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("field ", k + 1, ": '", Shorten(field), "' ", what));
}

// Splits a line into exactly `columns` comma-separated fields and calls parse(k, field) on each
// (trimmed), in order, up to the first error. A wrong field count is reported as such ("expected
// 3 comma-separated NOUN (EXPECTED), got 2 fields"), before any field is parsed.
template <typename ParseField>
absl::Status ParseFields(std::string_view line, int columns, const char* noun, std::string_view expected,
                         ParseField parse) {
  line = Trim(line);
  int fields = 1;
  for (char c : line) fields += (c == ',');
  if (fields != columns) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", columns, " comma-separated ", noun, " (",
                                                   std::string(expected), "), got ", fields, " field",
                                                   fields == 1 ? "" : "s"));
  }
  size_t pos = 0;
  for (int k = 0; k < columns; ++k) {
    size_t end = line.find(',', pos);
    if (end == std::string_view::npos) end = line.size();
    if (auto s = parse(k, Trim(line.substr(pos, end - pos))); !s.ok()) return s;
    pos = end + 1;
  }
  return absl::OkStatus();
}

// Appends the rows of up to max_rows data lines of `in` to *out (`columns` values each, parsed
// by parse_line(line, columns, expected, row)), counting lines in *line_number; errors are
// prefixed with "NAME:LINE: ". Returns the number of rows appended (0: end of input). On error
// *out keeps only the rows of earlier lines.
// on_blank(rows) is called for each blank line, with the rows appended by this call before it.
template <typename T, typename ParseLine, typename OnBlank>
absl::StatusOr<size_t> AppendRows(std::istream& in, const std::string& name, int columns, std::string_view expected,
                                  ParseLine parse_line, size_t max_rows, std::string* line, int64_t* line_number,
                                  std::vector<T>* out, OnBlank on_blank) {
  size_t rows = 0;
  while (rows < max_rows && std::getline(in, *line)) {
    ++*line_number;
    if (IsSkippableLine(*line)) {
      if (Trim(*line).empty()) on_blank(rows);
      continue;
    }
    const size_t base = out->size();
    out->resize(base + columns);
    if (auto s = parse_line(*line, columns, expected, out->data() + base); !s.ok()) {
      out->resize(base);
      return absl::InvalidArgumentError(absl::StrCat(name, ":", *line_number, ": ", s.message()));
    }
    ++rows;
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(name, ":", *line_number + 1, ": read error"));
  return rows;
}

}  // namespace

bool IsSkippableLine(std::string_view line) {
  const std::string_view t = Trim(line);
  return t.empty() || t.front() == '#';
}

absl::Status ParseCsvLine(std::string_view line, int columns, std::string_view expected, double* out) {
  return ParseFields(line, columns, "numbers", expected, [&](int k, std::string_view field) {
    if (!field.empty() && field.front() == '+') field.remove_prefix(1);  // from_chars rejects '+'
    double value = 0;
    const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec != std::errc() || ptr != field.data() + field.size()) {
      return FieldError(k, field,
                        ec == std::errc::result_out_of_range ? "is out of the range of a double" : "is not a number");
    }
    if (!std::isfinite(value)) return FieldError(k, field, "is not a finite number");
    out[k] = value;
    return absl::OkStatus();
  });
}

CsvReader::CsvReader(std::istream* in, std::string name, int columns, std::string expected)
    : in_(in), name_(name == "-" ? "<stdin>" : std::move(name)), columns_(columns), expected_(std::move(expected)) {}

absl::StatusOr<size_t> CsvReader::ReadRows(size_t max_rows, std::vector<double>* out) {
  absl::StatusOr<size_t> rows = AppendRows(*in_, name_, columns_, expected_, ParseCsvLine, max_rows, &line_,
                                           &line_number_, out, [&](size_t before) {
                                             // A gap lies between two rows: none before the first row, one per run of
                                             // blanks.
                                             const size_t at = rows_read_ + before;
                                             if (gaps_ != nullptr && at > 0 && (gaps_->empty() || gaps_->back() != at))
                                               gaps_->push_back(at);
                                           });
  if (rows.ok()) rows_read_ += *rows;
  return rows;
}

absl::StatusOr<std::vector<double>> ReadCsvFile(const std::string& path, int columns, const std::string& expected,
                                                std::vector<size_t>* gaps) {
  // "-": the descriptor directly, since std::cin (synchronized with stdio) is slow per line.
  std::ifstream file(path == "-" ? "/dev/stdin" : path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  CsvReader reader(&file, path, columns, expected);
  reader.set_gaps(gaps);
  std::vector<double> out;
  while (true) {
    auto rows = reader.ReadRows(1 << 16, &out);
    if (!rows.ok()) return rows.status();
    if (*rows == 0) break;
  }
  return out;
}

absl::Status ParseIdLine(std::string_view line, int columns, std::string_view expected, int64_t* out) {
  return ParseFields(line, columns, "integers", expected, [&](int k, std::string_view field) {
    std::string_view digits = field;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);  // from_chars rejects '+'
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) {
      return FieldError(
          k, field,
          ec == std::errc::result_out_of_range ? "is out of the range of a 64-bit integer" : "is not an integer");
    }
    out[k] = value;
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<int64_t>> ReadIdCsvFile(const std::string& path, int columns, const std::string& expected) {
  std::ifstream file(path == "-" ? "/dev/stdin" : path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::vector<int64_t> out;
  std::string line;
  int64_t line_number = 0;
  auto rows = AppendRows(file, path == "-" ? "<stdin>" : path, columns, expected, ParseIdLine,
                         std::numeric_limits<size_t>::max(), &line, &line_number, &out, [](size_t) {});
  if (!rows.ok()) return rows.status();
  return out;
}

}  // namespace cmestream::cli
