#include "service/flags.h"

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/engine/memory_budget.h"

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
    if (name == "--tls-cert" || name == "--tls-key" || name == "--tls-client-ca" || name == "--auth-tokens") {
      SecurityOptions& sec = o.security;
      s = text(name == "--tls-cert"        ? &sec.tls_cert
               : name == "--tls-key"       ? &sec.tls_key
               : name == "--tls-client-ca" ? &sec.tls_client_ca
                                           : &sec.auth_tokens);
    } else if (name == "--shard-self") {
      s = text(&o.shard.self);
    } else if (name == "--shard-peers") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<std::vector<std::pair<std::string, std::string>>> peers = ParsePeers(*v);
      if (!peers.ok()) return peers.status();
      o.shard.peers = *std::move(peers);
    } else if (name == "--max-batch-pairs") {
      s = integer(&o.limits.max_batch_pairs);
    } else if (name == "--max-models") {
      s = integer(&o.limits.max_models);
    } else if (name == "--max-dim") {
      s = integer(&o.limits.max_dim);
    } else if (name == "--max-abs-value") {
      s = number(&o.limits.max_abs_value);
    } else if (name == "--max-memory") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<double> bytes = ParseByteSize(*v);
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --max-memory is '", *v, "': ", bytes.status().message()));
      }
      o.limits.max_memory_bytes = *bytes;
    } else if (name == "--max-query-mb") {
      s = number(&o.limits.max_query_mb);
    } else if (name == "--accept-data-loss") {
      o.recovery.accept_data_loss = true;
    } else if (name == "--recover-from") {
      s = text(&o.recovery.recover_from);
    } else if (name == "--max-queued-batches") {
      s = integer(&o.limits.max_queued_batches);
    } else if (name == "--ingest-threads") {
      s = integer(&o.ingest_threads);
    } else if (name == "--helper-threads") {
      s = integer(&o.helper_threads);
    } else if (name == "--ingest-nice") {
      s = integer(&o.ingest_nice);
    } else if (name == "--listen" || name == "--metrics-listen" || name == "--data-dir") {
      s = text(name == "--listen" ? &o.listen : name == "--metrics-listen" ? &o.metrics_listen : &o.data_dir);
    } else if (name == "--wal-sync") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<WalSync> sync = ParseWalSync(*v);
      if (!sync.ok()) return sync.status();
      o.wal_sync = *sync;
    } else if (name == "--wal-sync-interval-ms") {
      s = number(&o.wal_sync_interval_ms);
    } else if (name == "--snapshot-interval") {
      s = number(&o.snapshot_interval_seconds);
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
