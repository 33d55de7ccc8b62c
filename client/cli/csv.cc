#include "client/cli/csv.h"

#include <charconv>
#include <cmath>
#include <fstream>

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

}  // namespace

bool IsSkippableLine(std::string_view line) {
  const std::string_view t = Trim(line);
  return t.empty() || t.front() == '#';
}

absl::Status ParseCsvLine(std::string_view line, int columns, std::string_view expected, double* out) {
  line = Trim(line);
  // Count fields first so that a wrong column count is reported as such, not as a parse error.
  int fields = 1;
  for (char c : line) fields += (c == ',');
  if (fields != columns) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", columns, " comma-separated numbers (",
                                                   std::string(expected), "), got ", fields, " field",
                                                   fields == 1 ? "" : "s"));
  }
  size_t pos = 0;
  for (int k = 0; k < columns; ++k) {
    size_t end = line.find(',', pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view field = Trim(line.substr(pos, end - pos));
    if (!field.empty() && field.front() == '+') field.remove_prefix(1);  // from_chars rejects '+'
    double value = 0;
    const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec != std::errc() || ptr != field.data() + field.size()) {
      if (ec == std::errc::result_out_of_range) {
        return absl::InvalidArgumentError(
            absl::StrCat("field ", k + 1, ": '", Shorten(field), "' is out of the range of a double"));
      }
      return absl::InvalidArgumentError(absl::StrCat("field ", k + 1, ": '", Shorten(field), "' is not a number"));
    }
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field ", k + 1, ": '", Shorten(field), "' is not a finite number"));
    }
    out[k] = value;
    pos = end + 1;
  }
  return absl::OkStatus();
}

CsvReader::CsvReader(std::istream* in, std::string name, int columns, std::string expected)
    : in_(in), name_(name == "-" ? "<stdin>" : std::move(name)), columns_(columns), expected_(std::move(expected)) {}

absl::StatusOr<size_t> CsvReader::ReadRows(size_t max_rows, std::vector<double>* out) {
  size_t rows = 0;
  while (rows < max_rows && std::getline(*in_, line_)) {
    ++line_number_;
    if (IsSkippableLine(line_)) continue;
    const size_t base = out->size();
    out->resize(base + columns_);
    if (auto s = ParseCsvLine(line_, columns_, expected_, out->data() + base); !s.ok()) {
      out->resize(base);
      return absl::InvalidArgumentError(absl::StrCat(name_, ":", line_number_, ": ", s.message()));
    }
    ++rows;
  }
  if (in_->bad()) {
    return absl::DataLossError(absl::StrCat(name_, ":", line_number_ + 1, ": read error"));
  }
  return rows;
}

absl::StatusOr<std::vector<double>> ReadCsvFile(const std::string& path, int columns, const std::string& expected) {
  // "-": the descriptor directly, since std::cin (synchronized with stdio) is slow per line.
  std::ifstream file(path == "-" ? "/dev/stdin" : path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  CsvReader reader(&file, path, columns, expected);
  std::vector<double> out;
  while (true) {
    auto rows = reader.ReadRows(1 << 16, &out);
    if (!rows.ok()) return rows.status();
    if (*rows == 0) break;
  }
  return out;
}

absl::Status ParseIdLine(std::string_view line, int columns, std::string_view expected, int64_t* out) {
  line = Trim(line);
  int fields = 1;
  for (char c : line) fields += (c == ',');
  if (fields != columns) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", columns, " comma-separated integers (",
                                                   std::string(expected), "), got ", fields, " field",
                                                   fields == 1 ? "" : "s"));
  }
  size_t pos = 0;
  for (int k = 0; k < columns; ++k) {
    size_t end = line.find(',', pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view field = Trim(line.substr(pos, end - pos));
    std::string_view digits = field;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);  // from_chars rejects '+'
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) {
      if (ec == std::errc::result_out_of_range) {
        return absl::InvalidArgumentError(
            absl::StrCat("field ", k + 1, ": '", Shorten(field), "' is out of the range of a 64-bit integer"));
      }
      return absl::InvalidArgumentError(absl::StrCat("field ", k + 1, ": '", Shorten(field), "' is not an integer"));
    }
    out[k] = value;
    pos = end + 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ReadIdCsvFile(const std::string& path, int columns, const std::string& expected) {
  std::ifstream file(path == "-" ? "/dev/stdin" : path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  const std::string name = path == "-" ? "<stdin>" : path;
  std::vector<int64_t> out;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    if (IsSkippableLine(line)) continue;
    const size_t base = out.size();
    out.resize(base + columns);
    if (auto s = ParseIdLine(line, columns, expected, out.data() + base); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_number, ": ", s.message()));
    }
  }
  if (file.bad()) {
    return absl::DataLossError(absl::StrCat(name, ":", line_number + 1, ": read error"));
  }
  return out;
}

}  // namespace cmestream::cli
