// Bounds-checked little-endian binary writer/reader for snapshots (CONTRIBUTING.md "Binary formats").
//
// WHAT THESE OBJECTS REPRESENT
//   Writer: an append-only byte string. Integers are fixed-width little-endian, doubles are
//   their IEEE-754 bit patterns (bit-exact round trip, NaN payloads included), strings and
//   matrices are length-prefixed. Objects are framed as
//       fourcc tag (4 bytes) | u32 version | u64 body length | body
//   so a reader can name what it expected and what it found, reject a version it does not
//   know, and check that a body is consumed exactly.
//   Reader: a cursor over a byte range with a sticky error. Every read checks the remaining
//   length first; the first failure records DataLoss("<source>: offset <N>: <what>") and every
//   later read returns zeros, so deserializers read a whole section and check ok() once.
//   Length prefixes are bounded by the caller (from header dimensions) and by the bytes left
//   BEFORE anything is allocated: a corrupt length can never make the reader allocate more
//   than the file holds.
//
// The file-level layout (magic, CRC32C footer) is the caller's (service/storage/snapshot.h); this
// layer only frames objects.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"

namespace cmestream::io {

// Four ASCII characters as a tag; stored in file order (the first character first).
constexpr uint32_t Fourcc(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 | uint32_t(uint8_t(s[2])) << 16 |
         uint32_t(uint8_t(s[3])) << 24;
}
// An object's identity in a stream: its tag, the newest version this build writes and reads, and
// the name a reader's errors give it.
struct ObjectFormat {
  uint32_t tag;
  uint32_t version;
  const char* name;
};

// Printable form of a tag for messages ("CCME", or hex when not printable).
std::string FourccName(uint32_t tag);

// The bytes of n doubles (a deserializer's Reserve and Expect budgets).
constexpr uint64_t DoubleBytes(int64_t n) { return static_cast<uint64_t>(n) * 8; }

// Little-endian fixed-width integers at a position of a caller's buffer (the WAL's record
// headers); Writer and Reader below use the same byte order.
inline void StoreLe32(char* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<char>((v >> (8 * k)) & 0xff);
}
inline void StoreLe64(char* p, uint64_t v) {
  for (int k = 0; k < 8; ++k) p[k] = static_cast<char>((v >> (8 * k)) & 0xff);
}
inline uint32_t LoadLe32(const char* p) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= uint32_t(uint8_t(p[k])) << (8 * k);
  return v;
}
inline uint64_t LoadLe64(const char* p) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= uint64_t(uint8_t(p[k])) << (8 * k);
  return v;
}

class Writer {
 public:
  // Bytes for a state digest (equal for equal learned states): what is not learned state but
  // a record of when things happened (an alarm's arrival time) is written as zeros.
  void set_for_digest(bool v) { for_digest_ = v; }
  bool for_digest() const { return for_digest_; }

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    U64(bits);
  }
  void Bytes(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }
  // u64 length, then the bytes.
  void String(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  // u64 count, then the doubles.
  void Doubles(const double* v, int64_t n) {
    U64(static_cast<uint64_t>(n));
    for (int64_t i = 0; i < n; ++i) F64(v[i]);
  }
  // u64 count, then each as i32 (lags, atom indices).
  void Ints(const std::vector<int>& v) {
    U64(v.size());
    for (int x : v) I32(x);
  }
  // u64 rows, u64 cols, then the entries in column-major order (whatever the storage order of
  // m; blocks of capacity-sized buffers are written without copying).
  template <typename Derived>
  void Matrix(const Eigen::DenseBase<Derived>& m) {
    U64(static_cast<uint64_t>(m.rows()));
    U64(static_cast<uint64_t>(m.cols()));
    out_.reserve(out_.size() + static_cast<size_t>(m.rows() * m.cols()) * 8);
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      for (Eigen::Index i = 0; i < m.rows(); ++i) F64(m(i, j));
    }
  }

  // Starts an object: tag, version, a length placeholder. Returns the handle for EndObject.
  size_t BeginObject(uint32_t tag, uint32_t version);
  // Patches the body length of the object begun at `handle`.
  void EndObject(size_t handle);

  const std::string& data() const { return out_; }
  std::string Release() { return std::move(out_); }
  size_t size() const { return out_.size(); }

 private:
  bool for_digest_ = false;
  std::string out_;
};

class Reader {
 public:
  // `source` names the bytes in messages (a file path, "export"); `base_offset` is the offset
  // of data[0] in that source, so messages give offsets into the file.
  Reader(std::string_view data, std::string source, uint64_t base_offset = 0)
      : data_(data), source_(std::move(source)), base_(base_offset) {}

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  // Absolute offset of the cursor in the source.
  uint64_t offset() const { return base_ + pos_; }
  uint64_t remaining() const { return ok() ? data_.size() - pos_ : 0; }
  const std::string& source() const { return source_; }

  // Records the first error as DataLoss("<source>: offset <offset()>: <message>"); returns it.
  absl::Status Fail(const std::string& message);

  uint8_t U8(const char* what);
  bool Bool(const char* what);
  uint32_t U32(const char* what);
  uint64_t U64(const char* what);
  int32_t I32(const char* what) { return static_cast<int32_t>(U32(what)); }
  int64_t I64(const char* what) { return static_cast<int64_t>(U64(what)); }
  double F64(const char* what);
  // Skips n bytes (bounded like a read).
  bool Skip(uint64_t n, const char* what) {
    if (!Need(n, what)) return false;
    pos_ += n;
    return true;
  }
  // A u64 count in [lo, hi] (else an error naming `what`, the value and the range).
  int64_t Count(const char* what, int64_t lo, int64_t hi);
  // An i32 in [lo, hi] (else "<what> is V (field at offset N), expected lo..hi").
  int32_t I32In(const char* what, int64_t lo, int64_t hi);
  // An i64 counter that cannot be negative (else "<what> is V, expected >= 0").
  int64_t NonNegativeI64(const char* what);
  // What Writer::Ints wrote: a count in [min_count, max_count] (named `count_what`), then that
  // many i32 (`what`). Empty after an error.
  std::vector<int> Ints(const char* count_what, const char* what, int64_t min_count, int64_t max_count);
  // Length-prefixed string of at most max_len bytes.
  std::string String(const char* what, uint64_t max_len);
  // Length-prefixed doubles; the count must equal `n` exactly (n is known from the header).
  bool Doubles(const char* what, int64_t n, double* out);
  // A matrix whose dimensions must be exactly rows x cols (known from header dimensions);
  // written column-major into `out` (any writable Eigen expression of that shape, e.g. the
  // top-left block of a capacity-sized buffer). Nothing is allocated here.
  template <typename Derived>
  bool MatrixInto(const char* what, Eigen::DenseBase<Derived>&& out) {
    return MatrixInto(what, out);
  }
  template <typename Derived>
  bool MatrixInto(const char* what, Eigen::DenseBase<Derived>& out) {
    if (!CheckMatrixHeader(what, out.rows(), out.cols())) return false;
    for (Eigen::Index j = 0; j < out.cols(); ++j) {
      for (Eigen::Index i = 0; i < out.rows(); ++i) out(i, j) = RawF64();
    }
    return true;
  }

  // True when every read so far succeeded and the options just read pass their Validate(); else
  // records "<name> options are invalid: <why>": options that fail their checks cannot come
  // from a file this code wrote, and nothing may be built from them.
  template <typename Options>
  bool ValidOptions(const Options& options, const char* name) {
    return ok() && Valid(options.Validate(), name);
  }

  // Allocation budget. Buffers sized from stored options (capacities, feature counts) cannot
  // be bounded by the bytes left (a CME allocates max_dict^2 doubles whatever its fill), so
  // deserializers call Reserve(bytes) first: it fails ("<what> would allocate B bytes, over
  // the budget of C bytes left") instead of letting a corrupt or hostile file exhaust memory.
  void set_allocation_budget(uint64_t bytes) { budget_ = bytes; }
  bool Reserve(uint64_t bytes, const char* what);
  // Fails ("truncated: ...") unless at least `bytes` are left for `what`, reading nothing. A
  // deserializer calls it with the bytes its header's sizes promise before it allocates for
  // them, so a short body claiming a large object costs nothing.
  bool Expect(uint64_t bytes, const char* what) { return Need(bytes, what); }

  // Reads an object header: the tag must be `tag` (else "expected <name> (TAG), found XXXX"),
  // the version in [1, max_version] (else "<name> version V is not supported by this build
  // (reads 1..max_version)"), the body length within the bytes left. Sets *version.
  bool BeginObject(uint32_t tag, uint32_t max_version, const char* name, uint32_t* version);
  // requires: a matching BeginObject. Fails unless the body was consumed exactly.
  bool EndObject(const char* name);

 private:
  bool Need(uint64_t n, const char* what);
  bool Valid(const absl::Status& validation, const char* name);
  bool CheckMatrixHeader(const char* what, int64_t rows, int64_t cols);
  double RawF64();  // requires Need(8) checked

  std::string_view data_;
  std::string source_;
  uint64_t base_ = 0;
  uint64_t pos_ = 0;
  absl::Status status_;
  std::vector<uint64_t> object_ends_;
  uint64_t budget_ = 4ull << 30;  // 4 GiB unless the caller says otherwise  // relative end offsets of open objects
};

// The filled rows of row buffers that share a fill count (transition pairs x and y): i64 rows,
// then, when rows > 0, the first `rows` rows of each buffer as a matrix.
template <typename... Buffers>
void WriteFilledRows(Writer& w, int64_t rows, const Buffers&... buffers) {
  w.I64(rows);
  if (rows > 0) (w.Matrix(buffers.topRows(rows)), ...);
}

// An object that a state may or may not hold: a bool, then (present) the object as its own
// Serialize writes it.
template <typename T>
void WriteOptional(Writer& w, const std::unique_ptr<T>& object) {
  w.Bool(object != nullptr);
  if (object) object->Serialize(w);
}

// Reads what WriteOptional wrote (T::Deserialize(Reader&) for the object): `out` holds the object
// when the flag named `what` says it is present, is empty otherwise.
template <typename T>
absl::Status ReadOptional(Reader& r, const char* what, std::unique_ptr<T>& out) {
  out.reset();
  if (!r.Bool(what)) return r.status();
  absl::StatusOr<T> object = T::Deserialize(r);
  if (!object.ok()) return object.status();
  out = std::make_unique<T>(*std::move(object));
  return absl::OkStatus();
}

}  // namespace cmestream::io
