// One list of fields for both directions of a binary format (CONTRIBUTING.md "Binary formats").
//
// An object's serializer lists its fields once, in a generic lambda (or a function template) over
// the direction:
//
//   constexpr io::ObjectFormat kFormat = {io::Fourcc("CCME"), 2, "CompressedCme"};
//   constexpr auto kOptionFields = [](auto& f, auto& o) {  // o: const when writing
//     f.Scalars("cme", io::Field("dim", o.dim), io::Field("sigma", o.sigma));
//   };
//   Serialize:   io::FieldWriter f(w, kFormat, kFormat.version);  kOptionFields(f, options_);  ...
//   Deserialize: auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kOptionFields);  ...
//
// so the order in which fields are written and the order in which they are read back cannot
// drift apart. A run of scalar fields is one Scalars call, each field named beside its value
// and stored as its type says (bool: Bool, int32_t: I32, int64_t: I64, uint64_t: U64, double:
// F64), the names after a common prefix: the call above writes what I32 and F64 would, and
// reads them back naming "cme dim" and "cme sigma". tests/core/io/test_format_layout.cc pins
// every object's bytes, so a member whose type changes cannot change the format unnoticed.
// Counters is the same for int64_t counters read as NonNegativeI64 (io::Counter), Matrices for
// matrices (io::Matrix).
// FieldWriter writes exactly what the matching Writer call writes (the name is
// not stored); FieldReader makes exactly the matching Reader call, with the name as `what` for
// its error messages. The checked reads (I32In, NonNegativeI64, Count) are plain I32/I64/U64 on
// disk; their bounds apply when reading. Matrices are read into buffers already sized as written.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "core/io/binary_io.h"

namespace cmestream::io {

// One named scalar of a Scalars() run: a pointer to a bool, int32_t, int64_t, uint64_t or double
// (const when writing). Only these exact types bind: an int64_t counter cannot be stored as an
// i32 by accident, because a value of any other type does not convert.
template <bool kConst>
struct ScalarField {
  template <class T>
  using Ptr = std::conditional_t<kConst, const T*, T*>;
  template <class T>
  using Ref = std::conditional_t<kConst, const T&, T&>;

  ScalarField(const char* n, Ref<bool> v) : name(n), value(&v) {}
  ScalarField(const char* n, Ref<int32_t> v) : name(n), value(&v) {}
  ScalarField(const char* n, Ref<int64_t> v) : name(n), value(&v) {}
  ScalarField(const char* n, Ref<uint64_t> v) : name(n), value(&v) {}
  ScalarField(const char* n, Ref<double> v) : name(n), value(&v) {}
  template <class T>
  ScalarField(const char*, const T&) = delete;  // any other type

  const char* name;
  std::variant<Ptr<bool>, Ptr<int32_t>, Ptr<int64_t>, Ptr<uint64_t>, Ptr<double>> value;
};

// A scalar field of a Scalars() run: const when the list is being written.
template <class T>
ScalarField<std::is_const_v<T>> Field(const char* name, T& v) {
  return ScalarField<std::is_const_v<T>>(name, v);
}

// One named counter of a Counters() run: an int64_t that cannot be negative (stored as I64).
template <bool kConst>
struct CounterField {
  CounterField(const char* n, std::conditional_t<kConst, const int64_t&, int64_t&> v) : name(n), value(&v) {}
  template <class T>
  CounterField(const char*, const T&) = delete;  // any other type

  const char* name;
  std::conditional_t<kConst, const int64_t*, int64_t*> value;
};

template <class T>
CounterField<std::is_const_v<T>> Counter(const char* name, T& v) {
  return CounterField<std::is_const_v<T>>(name, v);
}

// One named matrix of a Matrices() run (an Eigen matrix; when reading, sized as written).
template <class M>
struct MatrixField {
  const char* name;
  M& value;
};

template <class M>
MatrixField<M> Matrix(const char* name, M& m) {
  return MatrixField<M>{name, m};
}

class FieldWriter {
 public:
  explicit FieldWriter(Writer& w) : w_(w) {}
  // Begins object `format` at `version` (Writer::BeginObject); the destructor ends it, so a
  // Serialize that opens its object this way writes the whole body inside the writer's scope.
  FieldWriter(Writer& w, const ObjectFormat& format, uint32_t version)
      : w_(w), object_(w.BeginObject(format.tag, version)) {}
  ~FieldWriter() {
    if (object_ != kNoObject) w_.EndObject(object_);
  }
  FieldWriter(const FieldWriter&) = delete;
  FieldWriter& operator=(const FieldWriter&) = delete;

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
  template <class... Fs>
  void Scalars(const char* /*prefix*/, const Fs&... fields) {
    (std::visit([this](auto* v) { Put(*v); }, fields.value), ...);
  }
  template <class... Cs>
  void Counters(const char* /*prefix*/, const Cs&... counters) {
    (w_.I64(*counters.value), ...);
  }
  template <class... Ms>
  void Matrices(const char* /*prefix*/, const Ms&... matrices) {
    (w_.Matrix(matrices.value), ...);
  }
  // One of two values (an enum) as a u8: 0 for `first`, 1 for `second`.
  template <class E>
  void Choice(const char*, E v, E first, E /*second*/, const char* /*expected*/) {
    w_.U8(v == first ? 0 : 1);
  }

  Writer& writer() { return w_; }

 private:
  void Put(bool v) { w_.Bool(v); }
  void Put(int32_t v) { w_.I32(v); }
  void Put(int64_t v) { w_.I64(v); }
  void Put(uint64_t v) { w_.U64(v); }
  void Put(double v) { w_.F64(v); }

  static constexpr size_t kNoObject = ~size_t{0};
  Writer& w_;
  size_t object_ = kNoObject;
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
  // Each field named "<prefix> <name>" in the reader's messages.
  template <class... Fs>
  void Scalars(const char* prefix, const Fs&... fields) {
    (Get(prefix, fields), ...);
  }
  // NonNegativeI64 of each, named as in Scalars.
  template <class... Cs>
  void Counters(const char* prefix, const Cs&... counters) {
    ((*counters.value = r_.NonNegativeI64(Name(prefix, counters.name).c_str())), ...);
  }
  template <class... Ms>
  void Matrices(const char* prefix, const Ms&... matrices) {
    (r_.MatrixInto(Name(prefix, matrices.name).c_str(), matrices.value), ...);
  }
  // Else "<what> is K, expected <expected>".
  template <class E>
  void Choice(const char* what, E& v, E first, E second, const char* expected) {
    const uint8_t u = r_.U8(what);
    if (r_.ok() && u > 1) (void)r_.Fail(std::string(what) + " is " + std::to_string(u) + ", expected " + expected);
    v = u == 0 ? first : second;
  }

  Reader& reader() { return r_; }

 private:
  static std::string Name(const char* prefix, const char* name) { return std::string(prefix) + " " + name; }
  void Get(const char* prefix, const ScalarField<false>& f) {
    const std::string what = Name(prefix, f.name);
    std::visit([&](auto* v) { Get(what.c_str(), *v); }, f.value);
  }
  void Get(const char* what, bool& v) { v = r_.Bool(what); }
  void Get(const char* what, int32_t& v) { v = r_.I32(what); }
  void Get(const char* what, int64_t& v) { v = r_.I64(what); }
  void Get(const char* what, uint64_t& v) { v = r_.U64(what); }
  void Get(const char* what, double& v) { v = r_.F64(what); }

  Reader& r_;
};

// What ReadObjectStart read: the object's version (0 when its header could not be read) and its
// options.
template <class Options>
struct ObjectStart {
  uint32_t version = 0;
  Options options;
};

// The start of a Deserialize: the object's header (Reader::BeginObject with `format`), then its
// options as `option_fields(f, o)`
// lists them, or `option_fields(f, o, version)` for a list that changed with the version. After
// a bad header the options are the defaults and r holds the error: the caller checks r (e.g.
// Reader::ValidOptions) before it uses them.
template <class Options, class OptionFields>
ObjectStart<Options> ReadObjectStart(Reader& r, const ObjectFormat& format, const OptionFields& option_fields) {
  ObjectStart<Options> start;
  if (!r.BeginObject(format.tag, format.version, format.name, &start.version)) {
    start.version = 0;
    return start;
  }
  FieldReader f(r);
  if constexpr (std::is_invocable_v<const OptionFields&, FieldReader&, Options&, uint32_t>) {
    option_fields(f, start.options, start.version);
  } else {
    option_fields(f, start.options);
  }
  return start;
}

}  // namespace cmestream::io
