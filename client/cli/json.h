// Minimal JSON writer for the `cmestream` tool's --json output (no dependency beyond the STL).
//
// JsonWriter represents a document being written into a string. Commas between members and
// elements are inserted automatically. Doubles are written with 17 significant digits (they
// round-trip exactly); NaN and +-inf, which JSON cannot express, are written as null.
// requires: calls form a well-nested document (Key() before every value inside an object).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cmestream::cli {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Double(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // {"re": re, "im": im}
  JsonWriter& Complex(double re, double im);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  // Starts / ends a container ('{' or '[' / '}' or ']').
  JsonWriter& Open(char bracket);
  JsonWriter& Close(char bracket);
  std::string out_;
  std::vector<bool> first_;  // one entry per open container: no element written yet
  bool after_key_ = false;
};

// A packed row-major array (any container of doubles) as a list of `cols`-lists.
template <typename Container>
void WriteRowsJson(JsonWriter& w, const Container& a, int cols) {
  w.BeginArray();
  for (int i = 0; cols > 0 && i + cols <= static_cast<int>(a.size()); i += cols) {
    w.BeginArray();
    for (int j = 0; j < cols; ++j) w.Double(a[i + j]);
    w.EndArray();
  }
  w.EndArray();
}

// Any container of doubles as a list.
template <typename Container>
void WriteListJson(JsonWriter& w, const Container& a) {
  w.BeginArray();
  for (double v : a) w.Double(v);
  w.EndArray();
}

// JSON string literal for `s` (quotes included), escaping control characters.
std::string JsonQuote(std::string_view s);

}  // namespace cmestream::cli
