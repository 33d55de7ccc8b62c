#include "service/observability/per_model_series.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cmestream::service {

absl::StatusOr<PerModelSeries> PerModelSeries::Parse(const std::string& text) {
  PerModelSeries p;
  if (text == "all") return p;
  if (text == "none") {
    p.mode = Mode::kNone;
    return p;
  }
  int n = 0;
  const std::string prefix = "top-";
  if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() && absl::SimpleAtoi(text.substr(prefix.size()), &n) &&
      n >= 1 && n <= 1000000) {
    p.mode = Mode::kTop;
    p.top = n;
    return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text.substr(0, 40), "': expected all, none or top-N (N from 1 to 1000000)"));
}

std::string PerModelSeries::ToString() const {
  switch (mode) {
    case Mode::kAll:
      return "all";
    case Mode::kNone:
      return "none";
    case Mode::kTop:
      return absl::StrCat("top-", top);
  }
  return "all";
}

}  // namespace cmestream::service
