// Model placement over several cmestreamd pods by rendezvous hashing (header-only; the same
// function as client/python/cmestream/placement.py, byte for byte). The daemon (which refuses
// other pods' models, service/rpc/ownership.cc) and the clients (which route to the owner,
// client/cpp/sharded_client.cc) must agree on it, so it lives here, below both: a pure
// function of two strings, no I/O.
//   score(identity, model) = mix64(fnv1a64(identity + '\0' + model))
//   owner(model, identities) = the identity with the highest score (ties: smaller identity)
// Identities are stable pod names (cmestreamd-0, ...), or the targets themselves.
#ifndef CMESTREAM_CORE_COMMON_PLACEMENT_H_
#define CMESTREAM_CORE_COMMON_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cmestream::placement {

inline uint64_t Fnv1a64(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// The splitmix64 output finalizer.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t PlacementScore(std::string_view identity, std::string_view model) {
  std::string key(identity);
  key.push_back('\0');
  key.append(model);
  return Mix64(Fnv1a64(key));
}

// Index into `identities` of the owner of `model`; -1 when `identities` is empty.
inline int PlacementOwner(std::string_view model, const std::vector<std::string>& identities) {
  int best = -1;
  uint64_t best_score = 0;
  for (int i = 0; i < static_cast<int>(identities.size()); ++i) {
    const uint64_t s = PlacementScore(identities[i], model);
    if (best < 0 || s > best_score || (s == best_score && identities[i] < identities[best])) {
      best = i;
      best_score = s;
    }
  }
  return best;
}

}  // namespace cmestream::placement

#endif  // CMESTREAM_CORE_COMMON_PLACEMENT_H_
