#include "service/flags.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/engine/memory_budget.h"

namespace cmestream::service {

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args) {
  ParsedFlags out;
  DaemonOptions& o = out.options;
  // The flags that only store their value, by the value's kind; the others are parsed in the
  // loop below.
  const std::map<std::string, std::string*> text_flags = {
      {"--listen", &o.listen},
      {"--metrics-listen", &o.metrics_listen},
      {"--data-dir", &o.data_dir},
      {"--tls-cert", &o.security.tls_cert},
      {"--tls-key", &o.security.tls_key},
      {"--tls-client-ca", &o.security.tls_client_ca},
      {"--auth-tokens", &o.security.auth_tokens},
      {"--recover-from", &o.recovery.recover_from},
      {"--shard-self", &o.shard.self},
  };
  const std::map<std::string, double*> number_flags = {
      {"--refresh-interval", &o.refresh_interval_seconds},
      {"--shutdown-grace", &o.shutdown_grace_seconds},
      {"--max-abs-value", &o.limits.max_abs_value},
      {"--max-query-mb", &o.limits.max_query_mb},
      {"--wal-sync-interval-ms", &o.wal_sync_interval_ms},
      {"--snapshot-interval", &o.snapshot_interval_seconds},
      {"--testing-fail-on-value", &o.testing_fail_on_value},
      {"--evict-idle-seconds", &o.evict_idle_seconds},
      {"--refresh-budget", &o.refresh_budget},
  };
  const std::map<std::string, int*> int_flags = {
      {"--max-models", &o.limits.max_models},
      {"--max-dim", &o.limits.max_dim},
      {"--max-queued-batches", &o.limits.max_queued_batches},
      {"--ingest-threads", &o.ingest_threads},
      {"--helper-threads", &o.helper_threads},
      {"--ingest-nice", &o.ingest_nice},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (name == "--help" || name == "-h") {
      out.help = true;
      continue;
    }
    if (name == "--version") {
      out.version = true;
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
    const auto text = [&](std::string* target) -> absl::Status {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      *target = *std::move(v);
      return absl::OkStatus();
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
    const auto integer = [&](auto* target) -> absl::Status {
      double v = 0;
      if (absl::Status ns = number(&v); !ns.ok()) return ns;
      if (!(v >= -2147483648.0 && v <= 2147483647.0) || v != static_cast<double>(static_cast<int64_t>(v))) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", name, " is ", v, ", expected an integer"));
      }
      *target = static_cast<std::remove_pointer_t<decltype(target)>>(v);
      return absl::OkStatus();
    };
    if (const auto t = text_flags.find(name); t != text_flags.end()) {
      s = text(t->second);
    } else if (const auto n = number_flags.find(name); n != number_flags.end()) {
      s = number(n->second);
    } else if (const auto k = int_flags.find(name); k != int_flags.end()) {
      s = integer(k->second);
    } else if (name == "--max-batch-pairs") {
      s = integer(&o.limits.max_batch_pairs);  // the one 64-bit integer
    } else if (name == "--shard-peers") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<std::vector<std::pair<std::string, std::string>>> peers = ParsePeers(*v);
      if (!peers.ok()) return peers.status();
      o.shard.peers = *std::move(peers);
    } else if (name == "--max-memory") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<double> bytes = ParseByteSize(*v);
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --max-memory is '", *v, "': ", bytes.status().message()));
      }
      if (absl::Status fits = CheckMemoryBudgetFitsHost(*bytes, HostMemoryLimit()); !fits.ok()) return fits;
      o.limits.max_memory_bytes = *bytes;
    } else if (name == "--accept-data-loss") {
      o.recovery.accept_data_loss = true;
    } else if (name == "--metrics-per-model") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<PerModelSeries> series = PerModelSeries::Parse(*v);
      if (!series.ok())
        return absl::InvalidArgumentError(absl::StrCat("flag --metrics-per-model ", series.status().message()));
      o.metrics_per_model = *series;
    } else if (name == "--wal-sync") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<WalSync> sync = ParseWalSync(*v);
      if (!sync.ok()) return sync.status();
      o.wal_sync = *sync;
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
