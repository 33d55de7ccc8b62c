// What tests and benchmarks compare objects by: the bytes an object serializes to (its Serialize,
// what a snapshot holds of it), and their 64-bit FNV-1a hash, the hash the snapshot files and the
// CLI's digests use (service/storage/snapshot.cc, placement::Fnv1a64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/io/binary_io.h"

namespace cmestream::test_support {

template <class T>
std::string Bytes(const T& object) {
  io::Writer w;
  object.Serialize(w);
  return w.Release();
}

inline constexpr uint64_t kFnvBasis = 1469598103934665603ULL;

// FNV-1a over n bytes, continuing from h (chain calls to hash several buffers).
inline uint64_t Fnv1a(const void* data, size_t n, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

inline uint64_t Fnv1a(const std::string& bytes) { return Fnv1a(bytes.data(), bytes.size()); }

}  // namespace cmestream::test_support
