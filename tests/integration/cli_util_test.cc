// Unit tests of the `cmestream` tool's input/output pieces: the strict CSV reader (what a user
// sees for each kind of malformed line) and the JSON writer (round-trip precision, null for
// non-finite values).
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cli/timescale_text.h"
#include "client/cpp/client.h"
#include "core/common/placement.h"

namespace cmestream::cli {
namespace {

TEST(CsvReader, ReadsRowsSkippingBlankAndCommentLines) {
  std::istringstream in("# x1,x2,y1,y2\n1,2,3,4\n\n  \n  # note\n-0.5 , 1e-3,\t+2,7\r\n");
  CsvReader reader(&in, "f.csv", 4, "x_1..x_2,y_1..y_2");
  std::vector<double> out;
  auto rows = reader.ReadRows(100, &out);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 2u);
  EXPECT_EQ(out, (std::vector<double>{1, 2, 3, 4, -0.5, 1e-3, 2, 7}));
  EXPECT_EQ(*reader.ReadRows(100, &out), 0u);
}

TEST(CsvReader, ReturnsAtMostMaxRowsPerCall) {
  std::istringstream in("1\n2\n3\n4\n5\n");
  CsvReader reader(&in, "-", 1, "x_1");
  std::vector<double> out;
  EXPECT_EQ(*reader.ReadRows(2, &out), 2u);
  EXPECT_EQ(*reader.ReadRows(2, &out), 2u);
  EXPECT_EQ(*reader.ReadRows(2, &out), 1u);
  EXPECT_EQ(*reader.ReadRows(2, &out), 0u);
  EXPECT_EQ(out, (std::vector<double>{1, 2, 3, 4, 5}));
}

TEST(CsvReader, WrongColumnCountNamesFileLineAndExpectation) {
  std::istringstream in("1,2,3,4\n# c\n1,2,3\n");
  CsvReader reader(&in, "data.csv", 4, "x_1..x_2,y_1..y_2");
  std::vector<double> out;
  auto rows = reader.ReadRows(100, &out);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().message(),
            "data.csv:3: expected 4 comma-separated numbers (x_1..x_2,y_1..y_2), got 3 fields");
  EXPECT_EQ(out.size(), 4u);  // only the good first line
}

TEST(CsvReader, NonNumberAndNonFiniteAreRejectedWithTheField) {
  double v[2];
  auto s = ParseCsvLine("1.5,abc", 2, "x", v);
  EXPECT_EQ(s.message(), "field 2: 'abc' is not a number");
  s = ParseCsvLine("1.5x,2", 2, "x", v);
  EXPECT_EQ(s.message(), "field 1: '1.5x' is not a number");
  s = ParseCsvLine("nan,2", 2, "x", v);
  EXPECT_EQ(s.message(), "field 1: 'nan' is not a finite number");
  s = ParseCsvLine("1,inf", 2, "x", v);
  EXPECT_EQ(s.message(), "field 2: 'inf' is not a finite number");
  s = ParseCsvLine("1,", 2, "x", v);
  EXPECT_EQ(s.message(), "field 2: '' is not a number");
  s = ParseCsvLine("1,1e999", 2, "x", v);
  EXPECT_EQ(s.message(), "field 2: '1e999' is out of the range of a double");
  std::istringstream in("0,1\n1,zz\n");
  CsvReader reader(&in, "-", 2, "x");
  std::vector<double> out;
  EXPECT_EQ(reader.ReadRows(10, &out).status().message(), "<stdin>:2: field 2: 'zz' is not a number");
}

TEST(CsvReader, ParsesDoublesExactly) {
  double v[1];
  ASSERT_TRUE(ParseCsvLine("0.10000000000000001", 1, "x", v).ok());
  EXPECT_EQ(v[0], 0.1);
  ASSERT_TRUE(ParseCsvLine("-1.7976931348623157e308", 1, "x", v).ok());
  EXPECT_EQ(v[0], -std::numeric_limits<double>::max());
}

TEST(IdCsv, ParsesIntegersAndRefusesEverythingElse) {
  int64_t out[2] = {-7, -7};
  EXPECT_TRUE(ParseIdLine(" 3 ,\t+17\r", 2, "i,j", out).ok());
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 17);
  // Negative ids parse (the daemon owns the range check and names the id).
  EXPECT_TRUE(ParseIdLine("-1,9223372036854775807", 2, "i,j", out).ok());
  EXPECT_EQ(out[0], -1);
  EXPECT_EQ(out[1], INT64_MAX);
  // An integral-looking float is not an id: no silent truncation.
  auto s = ParseIdLine("1,2.0", 2, "i,j", out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "field 2: '2.0' is not an integer");
  EXPECT_EQ(ParseIdLine("1e2,2", 2, "i,j", out).message(), "field 1: '1e2' is not an integer");
  EXPECT_EQ(ParseIdLine("1,", 2, "i,j", out).message(), "field 2: '' is not an integer");
  EXPECT_EQ(ParseIdLine("99999999999999999999,1", 2, "i,j", out).message(),
            "field 1: '99999999999999999999' is out of the range of a 64-bit integer");
  EXPECT_EQ(ParseIdLine("1,2,3", 2, "i,j", out).message(), "expected 2 comma-separated integers (i,j), got 3 fields");
}

TEST(IdCsv, ReadsFileWithFileAndLineInErrors) {
  const std::string path = ::testing::TempDir() + "/ids.csv";
  {
    std::ofstream f(path);
    f << "# i,j\n0,1\n\n1,2\n2,x\n";
  }
  auto bad = ReadIdCsvFile(path, 2, "i,j");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path + ":5: field 2: 'x' is not an integer");
  {
    std::ofstream f(path);
    f << "# i,j\n0,1\n\n1,2\n";
  }
  auto good = ReadIdCsvFile(path, 2, "i,j");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, (std::vector<int64_t>{0, 1, 1, 2}));
  EXPECT_EQ(ReadIdCsvFile(path + ".missing", 1, "id").status().code(), absl::StatusCode::kNotFound);
}

TEST(JsonWriter, NestsAndSeparates) {
  JsonWriter w;
  w.BeginObject().Key("a").Uint(1).Key("b").BeginArray().Complex(1, -2).Null().EndArray();
  w.Key("s").String("q\"\\\n").Key("t").Bool(true).Key("e").BeginArray().EndArray().EndObject();
  EXPECT_EQ(w.str(), R"({"a":1,"b":[{"re":1,"im":-2},null],"s":"q\"\\\n","t":true,"e":[]})");
}

TEST(JsonWriter, DoublesRoundTripAndNonFiniteIsNull) {
  JsonWriter w;
  w.BeginArray().Double(0.1).Double(1.0 / 3).Double(INFINITY).Double(NAN).Double(-0.0);
  w.EndArray();
  EXPECT_EQ(w.str(), "[0.10000000000000001,0.33333333333333331,null,null,-0]");
  EXPECT_EQ(std::stod("0.33333333333333331"), 1.0 / 3);
}

// The same placement as client/python/cmestream/placement.py (test_sharding.py pins the same
// values): published FNV-1a 64 and splitmix64 vectors, then the score and owner.
TEST(TimescaleCell, InfiniteHasNoErrorBarAndNothingPrintsNan) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(TimescaleCell(12.345678, 0.5678), "     12.35 +- 0.568    ");
  EXPECT_EQ(TimescaleCell(inf, nan), "       inf             ");
  EXPECT_EQ(TimescaleCell(inf, 3.0), "       inf             ");  // an error bar on inf means nothing
  EXPECT_EQ(TimescaleCell(nan, nan), "       n/a             ");
  EXPECT_EQ(TimescaleCell(2.5, nan), "       2.5 +- n/a      ");
  for (double v : {12.345678, inf, nan, 2.5, 1e-300, 1e300}) {
    for (double se : {0.5678, inf, nan}) {
      const std::string cell = TimescaleCell(v, se);
      EXPECT_EQ(cell.size(), static_cast<size_t>(kTimescaleCellWidth)) << cell;
      EXPECT_EQ(cell.find("nan"), std::string::npos) << cell;
      if (std::isinf(v)) {
        EXPECT_EQ(cell.find("+-"), std::string::npos) << cell;
      }
    }
  }
}

TEST(Placement, MatchesTheReferenceValues) {
  EXPECT_EQ(placement::Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(placement::Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(placement::Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(placement::Mix64(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(placement::PlacementScore("cmestreamd-0", "duffing"), 186938994056951563ULL);
  EXPECT_EQ(placement::PlacementOwner("duffing", {"cmestreamd-0", "cmestreamd-1", "cmestreamd-2"}), 2);
  EXPECT_EQ(placement::PlacementOwner("duffing", {"cmestreamd-2", "cmestreamd-1", "cmestreamd-0"}), 0);
  EXPECT_EQ(placement::PlacementOwner("x", {}), -1);
}

TEST(WithDefaultPort, AddsThePortOnlyWhereThereIsNone) {
  using client::WithDefaultPort;
  EXPECT_EQ(WithDefaultPort("localhost"), "localhost:50051");
  EXPECT_EQ(WithDefaultPort("10.0.0.7"), "10.0.0.7:50051");
  EXPECT_EQ(WithDefaultPort("localhost:7000"), "localhost:7000");
  EXPECT_EQ(WithDefaultPort("::1"), "[::1]:50051");
  EXPECT_EQ(WithDefaultPort("[::1]"), "[::1]:50051");
  EXPECT_EQ(WithDefaultPort("[::1]:7000"), "[::1]:7000");
  EXPECT_EQ(WithDefaultPort("dns:///svc.ns.svc.cluster.local"), "dns:///svc.ns.svc.cluster.local:50051");
  EXPECT_EQ(WithDefaultPort("dns:///svc:7000"), "dns:///svc:7000");
  EXPECT_EQ(WithDefaultPort("unix:/tmp/cmestream.sock"), "unix:/tmp/cmestream.sock");
  EXPECT_EQ(WithDefaultPort("unix:///tmp/cmestream.sock"), "unix:///tmp/cmestream.sock");
  EXPECT_EQ(WithDefaultPort("host", 9000), "host:9000");
}

}  // namespace
}  // namespace cmestream::cli
