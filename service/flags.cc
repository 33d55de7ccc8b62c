#include "service/flags.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cmestream::service {

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args) {
  ParsedFlags out;
  DaemonOptions& o = out.options;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (name == "--help" || name == "-h") {
      out.help = true;
      continue;
    }
    if (const size_t eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const auto next = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("flag ", name, " needs a value"));
      return args[++i];
    };
    const auto number = [&](double* target) -> absl::Status {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtod(*v, target)) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", name, " is '", *v, "', expected a number"));
      }
      return absl::OkStatus();
    };
    absl::Status s;
    if (name == "--listen" || name == "--metrics-listen" || name == "--data-dir") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      (name == "--listen" ? o.listen : name == "--metrics-listen" ? o.metrics_listen : o.data_dir) = *v;
    } else if (name == "--refresh-interval") {
      s = number(&o.refresh_interval_seconds);
    } else if (name == "--shutdown-grace") {
      s = number(&o.shutdown_grace_seconds);
    } else if (name == "--max-message-mb") {
      double mb = 0;
      s = number(&mb);
      if (s.ok() && (mb != static_cast<int>(mb))) {
        s = absl::InvalidArgumentError(absl::StrCat("flag --max-message-mb is ", mb, ", expected an integer"));
      }
      o.max_message_mb = static_cast<int>(mb);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", args[i], "' (see --help)"));
    }
    if (!s.ok()) return s;
  }
  if (!out.help) {
    if (absl::Status s = o.Validate(); !s.ok()) return s;
  }
  return out;
}

}  // namespace cmestream::service
