// Command-line flags of cmestreamd (hand-written: Abseil flags cannot spell --metrics-listen).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "service/daemon.h"

namespace cmestream::service {

inline constexpr char kUsage[] =
    "usage: cmestreamd [--listen HOST:PORT] [--metrics-listen HOST:PORT] [--data-dir DIR]\n"
    "                  [--refresh-interval SECONDS] [--refresh-budget CORES] [--max-message-mb MB]\n"
    "                  [--shutdown-grace SECONDS]\n"
    "                  [--max-batch-pairs N] [--max-models N] [--max-dim D] [--max-queued-batches Q]\n"
    "                  [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--auth-tokens FILE]\n"
    "                  [--wal-sync always|interval|never] [--wal-sync-interval-ms MS]\n"
    "                  [--snapshot-interval SECONDS] [--evict-idle-seconds S] [--metrics-per-model all|none|top-N] "
    "[--max-abs-value V] [--max-memory "
    "BYTES]\n"
    "                  [--max-query-mb MB] [--accept-data-loss] [--recover-from SNAPSHOT_FILE]\n"
    "                  [--ingest-threads N] [--helper-threads N] [--ingest-nice N] [--shard-self ID --shard-peers "
    "ID=HOST:PORT,...]\n"
    "                  [--version] [--help]\n"
    "\n"
    "  --listen HOST:PORT          gRPC address (default 127.0.0.1:50051; port 0 = any free port)\n"
    "  --metrics-listen HOST:PORT  Prometheus /metrics address (default 127.0.0.1:9464; port 0 = any)\n"
    "  --data-dir DIR              data directory, created and locked (default ./cmestream-data)\n"
    "  --refresh-interval SECONDS  default view refresh period of new models (default 2)\n"
    "  --refresh-budget CORES      share of one core the background view refreshes of all models may\n"
    "                              use together (default 0.25); due views wait, oldest first, and\n"
    "                              Refresh requests are served at once\n"
    "  --max-message-mb MB         largest gRPC message accepted, i.e. one ingest batch (default 64)\n"
    "  --shutdown-grace SECONDS    time given to in-flight RPCs on SIGTERM/SIGINT (default 5)\n"
    "  --max-batch-pairs N         most pairs in one ingest batch (default 1000000)\n"
    "  --max-models N              most models the daemon holds (default 1000)\n"
    "  --max-dim D                 largest model dim accepted (default 4096)\n"
    "  --max-queued-batches Q      batches that may wait for one model's learner; more get\n"
    "                              RESOURCE_EXHAUSTED with trailing metadata retry-after-ms (default 64)\n"
    "  --ingest-threads N          workers that learn batches, off the RPC threads (default: the cores,\n"
    "                              4 per core with --wal-sync always)\n"
    "  --helper-threads N          threads that take part of one model's per-pair work while its\n"
    "                              ingest worker does the rest, so one stream uses two cores\n"
    "                              (default: the cores - 1, at least 1; 0 = off)\n"
    "  --ingest-nice N             nice offset (0..19) of those workers below the RPC threads, so queries\n"
    "                              run first when the cores are busy (default 0; Linux only)\n"
    "  --tls-cert FILE             PEM server certificate: serve TLS (with --tls-key)\n"
    "  --tls-key FILE              PEM private key of --tls-cert\n"
    "  --tls-client-ca FILE        PEM CA: require and verify client certificates signed by it\n"
    "  --auth-tokens FILE          bearer tokens, one 'TOKEN SCOPES' per line (scopes admin,write,read)\n"
    "  --wal-sync POLICY           write-ahead log fsync: always (every batch before its ack; default),\n"
    "                              interval (every --wal-sync-interval-ms) or never (kernel decides)\n"
    "  --wal-sync-interval-ms MS   fsync period with --wal-sync interval (default 100)\n"
    "  --snapshot-interval SECONDS snapshot every model to DATA_DIR/snapshots this often (default 60;\n"
    "                              0 = only at clean shutdown and on request); the WAL segments the\n"
    "                              oldest kept snapshot covers are deleted\n"
    "  --metrics-per-model all|none|top-N  which models have series with a model label: none keeps\n"
    "                              the fleet series only; top-N those of the N models with the most\n"
    "                              alarms, then pairs, in the last minute (fleets of thousands of\n"
    "                              models); default all\n"
    "  --evict-idle-seconds S      a model with no batch and no view query for S seconds is written to\n"
    "                              DATA_DIR/evicted and its learner freed (its view still answers; its\n"
    "                              next batch loads it back); default 600, 0 = never\n"
    "  --max-abs-value V           largest |coordinate| accepted in a batch (default 1e12)\n"
    "  --max-memory BYTES          memory budget for models, e.g. 8G or 512M; a model whose estimated\n"
    "                              size exceeds what is left is refused (default: the cgroup limit,\n"
    "                              else physical memory, times 0.8)\n"
    "  --max-query-mb MB           largest estimated working set of one query (default 256)\n"
    "  --accept-data-loss          start even though recovery found damage that loses acknowledged\n"
    "                              data (a missing or unusable snapshot or WAL segment, a gap in the\n"
    "                              WAL); what is lost is printed, one JSON line per model. Without it\n"
    "                              the daemon refuses to start\n"
    "  --recover-from FILE         start from this snapshot file (e.g. a copy kept elsewhere) instead\n"
    "                              of the manifest's; the WAL after it is replayed, and the WAL\n"
    "                              segments the manifest lists must still all exist\n"
    "  --shard-self ID             this pod's identity among --shard-peers (e.g. the StatefulSet pod\n"
    "                              name). Off by default: the daemon owns every model\n"
    "  --shard-peers LIST          every pod as ID=HOST:PORT,ID=HOST:PORT,...: a model belongs to the\n"
    "                              ID winning the rendezvous hash of its name (the clients' placement);\n"
    "                              calls for a model another pod owns get FAILED_PRECONDITION naming\n"
    "                              it (trailer cmestream-owner: ID=HOST:PORT)\n"
    "  --version                   print the version and build commit, then exit\n"
    "\n"
    "Once serving, prints one line to stdout:\n"
    "  cmestreamd listening grpc=HOST:PORT metrics=HOST:PORT\n";

struct ParsedFlags {
  DaemonOptions options;
  bool help = false;
  bool version = false;  // --version: print the version and build commit, exit 0
};

// Accepts "--flag value" and "--flag=value". InvalidArgument names the bad flag.
absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args);

}  // namespace cmestream::service
