// One list of fields for both directions of a binary format (CONTRIBUTING.md "Binary formats").
//
// An object's serializer lists its fields once, in a function template over the direction:
//
//   template <class Fields, class Options>  // Options: const for writing, mutable for reading
//   void OptionFields(Fields& f, Options& o) {
//     f.I32("cme dim", o.dim);
//     f.F64("cme sigma", o.sigma);
//   }
//   Serialize:   io::FieldWriter f(w);  OptionFields(f, options_);
//   Deserialize: io::FieldReader f(r);  Options o;  OptionFields(f, o);
//
// so the order in which fields are written and the order in which they are read back cannot
// drift apart. FieldWriter writes exactly what the matching Writer call writes (the name is
// not stored); FieldReader makes exactly the matching Reader call, with the name as `what` for
// its error messages. The checked reads (I32In, NonNegativeI64, Count) are plain I32/I64/U64 on
// disk; their bounds apply when reading. Matrices are read into buffers already sized as written.
#pragma once

#include <cstdint>

#include "core/io/binary_io.h"

namespace cmestream::io {

class FieldWriter {
 public:
  explicit FieldWriter(Writer& w) : w_(w) {}

  void Bool(const char*, bool v) { w_.Bool(v); }
  void I32(const char*, int32_t v) { w_.I32(v); }
  void I64(const char*, int64_t v) { w_.I64(v); }
  void U64(const char*, uint64_t v) { w_.U64(v); }
  void F64(const char*, double v) { w_.F64(v); }
  void I32In(const char*, int32_t v, int64_t /*lo*/, int64_t /*hi*/) { w_.I32(v); }
  void NonNegativeI64(const char*, int64_t v) { w_.I64(v); }
  void Count(const char*, int64_t v, int64_t /*lo*/, int64_t /*hi*/) { w_.U64(static_cast<uint64_t>(v)); }
  void Doubles(const char*, int64_t n, const double* v) { w_.Doubles(v, n); }
  template <typename Derived>
  void Matrix(const char*, const Eigen::DenseBase<Derived>& m) {
    w_.Matrix(m);
  }

  Writer& writer() { return w_; }

 private:
  Writer& w_;
};

class FieldReader {
 public:
  explicit FieldReader(Reader& r) : r_(r) {}

  void Bool(const char* what, bool& v) { v = r_.Bool(what); }
  void I32(const char* what, int32_t& v) { v = r_.I32(what); }
  void I64(const char* what, int64_t& v) { v = r_.I64(what); }
  void U64(const char* what, uint64_t& v) { v = r_.U64(what); }
  void F64(const char* what, double& v) { v = r_.F64(what); }
  void I32In(const char* what, int32_t& v, int64_t lo, int64_t hi) { v = r_.I32In(what, lo, hi); }
  void NonNegativeI64(const char* what, int64_t& v) { v = r_.NonNegativeI64(what); }
  // A u64 count in [lo, hi], into an int or an int64_t.
  template <typename Int>
  void Count(const char* what, Int& v, int64_t lo, int64_t hi) {
    v = static_cast<Int>(r_.Count(what, lo, hi));
  }
  void Doubles(const char* what, int64_t n, double* v) { r_.Doubles(what, n, v); }
  // Into a matrix (or block) already sized as written: Reader::MatrixInto.
  template <typename Derived>
  void Matrix(const char* what, Eigen::DenseBase<Derived>& m) {
    r_.MatrixInto(what, m);
  }
  template <typename Derived>
  void Matrix(const char* what, Eigen::DenseBase<Derived>&& m) {
    r_.MatrixInto(what, m);
  }

  Reader& reader() { return r_; }

 private:
  Reader& r_;
};

}  // namespace cmestream::io
