// How far a start-up recovery has got, for the RPCs that arrive meanwhile: written by the
// recovery thread (Daemon::Recover, Wal::Open), read by the gRPC threads of the recovering
// server (service/rpc/recovering_service.h), so plain atomics and no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace cmestream::service {

struct RecoveryProgress {
  enum Phase : int { kSnapshot = 0, kReplay = 1, kSettle = 2 };
  std::atomic<int> phase{kSnapshot};
  // WAL records to replay (those after the snapshot's covered sequence), counted from the record
  // headers before replay starts (an estimate: damage ends the count early), and replayed so far.
  std::atomic<uint64_t> total{0};
  std::atomic<uint64_t> replayed{0};

  // "recovering: N of M records replayed; ..." (the status message of every refused RPC).
  std::string Describe() const;
};

}  // namespace cmestream::service
