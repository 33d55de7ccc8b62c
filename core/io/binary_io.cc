#include "core/io/binary_io.h"

#include "absl/strings/str_cat.h"

namespace cmestream::io {

std::string FourccName(uint32_t tag) {
  std::string s;
  bool printable = true;
  for (int k = 0; k < 4; ++k) {
    const char c = static_cast<char>((tag >> (8 * k)) & 0xff);
    if (c < 0x20 || c > 0x7e) printable = false;
    s.push_back(c);
  }
  if (printable) return s;
  return absl::StrCat("0x", absl::Hex(tag, absl::kZeroPad8));
}

void Writer::U32(uint32_t v) {
  char b[4];
  StoreLe32(b, v);
  out_.append(b, 4);
}

void Writer::U64(uint64_t v) {
  char b[8];
  StoreLe64(b, v);
  out_.append(b, 8);
}

size_t Writer::BeginObject(uint32_t tag, uint32_t version) {
  U32(tag);
  U32(version);
  const size_t handle = out_.size();
  U64(0);
  return handle;
}

void Writer::EndObject(size_t handle) {
  const uint64_t length = out_.size() - handle - 8;
  for (int k = 0; k < 8; ++k) out_[handle + k] = static_cast<char>((length >> (8 * k)) & 0xff);
}

absl::Status Reader::Fail(const std::string& message) {
  if (status_.ok()) status_ = absl::DataLossError(absl::StrCat(source_, ": offset ", offset(), ": ", message));
  return status_;
}

bool Reader::Need(uint64_t n, const char* what) {
  if (!ok()) return false;
  const uint64_t end = object_ends_.empty() ? data_.size() : object_ends_.back();
  if (n > end - pos_) {
    (void)Fail(absl::StrCat("truncated: reading ", what, " needs ", n, " bytes, ", end - pos_, " left",
                            object_ends_.empty() ? " in the file" : " in the enclosing object"));
    return false;
  }
  return true;
}

uint8_t Reader::U8(const char* what) {
  if (!Need(1, what)) return 0;
  return static_cast<uint8_t>(data_[pos_++]);
}

bool Reader::Bool(const char* what) {
  const uint8_t v = U8(what);
  if (v > 1) (void)Fail(absl::StrCat(what, " is ", int{v}, ", expected a boolean 0 or 1"));
  return v == 1;
}

uint32_t Reader::U32(const char* what) {
  if (!Need(4, what)) return 0;
  const uint32_t v = LoadLe32(data_.data() + pos_);
  pos_ += 4;
  return v;
}

uint64_t Reader::U64(const char* what) {
  if (!Need(8, what)) return 0;
  const uint64_t v = LoadLe64(data_.data() + pos_);
  pos_ += 8;
  return v;
}

double Reader::RawF64() {
  const uint64_t v = LoadLe64(data_.data() + pos_);
  pos_ += 8;
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}

double Reader::F64(const char* what) {
  if (!Need(8, what)) return 0;
  return RawF64();
}

int64_t Reader::Count(const char* what, int64_t lo, int64_t hi) {
  const uint64_t at = offset();
  const uint64_t v = U64(what);
  if (!ok()) return lo;
  if (v > static_cast<uint64_t>(INT64_MAX) || static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi) {
    pos_ = at - base_;  // report the offset of the count itself
    (void)Fail(absl::StrCat(what, " is ", v, ", expected ", lo, "..", hi));
    return lo;
  }
  return static_cast<int64_t>(v);
}

int32_t Reader::I32In(const char* what, int64_t lo, int64_t hi) {
  const uint64_t at = offset();
  const int32_t v = I32(what);
  if (ok() && (v < lo || v > hi)) {
    (void)Fail(absl::StrCat(what, " is ", v, " (field at offset ", at, "), expected ", lo, "..", hi));
  }
  return v;
}

int64_t Reader::NonNegativeI64(const char* what) {
  const int64_t v = I64(what);
  if (ok() && v < 0) (void)Fail(absl::StrCat(what, " is ", v, ", expected >= 0"));
  return v;
}

std::vector<int> Reader::Ints(const char* count_what, const char* what, int64_t min_count, int64_t max_count) {
  const int64_t n = Count(count_what, min_count, max_count);
  if (!ok()) return {};
  std::vector<int> v(n);
  for (int& x : v) x = I32(what);
  return v;
}

bool Reader::Valid(const absl::Status& validation, const char* name) {
  if (validation.ok()) return true;
  (void)Fail(absl::StrCat(name, " options are invalid: ", validation.message()));
  return false;
}

std::string Reader::String(const char* what, uint64_t max_len) {
  const int64_t n = Count(what, 0, static_cast<int64_t>(std::min<uint64_t>(max_len, INT64_MAX)));
  if (!Need(static_cast<uint64_t>(n), what)) return {};
  std::string s(data_.substr(pos_, static_cast<size_t>(n)));
  pos_ += static_cast<uint64_t>(n);
  return s;
}

bool Reader::Doubles(const char* what, int64_t n, double* out) {
  Count(what, n, n);
  if (!Need(static_cast<uint64_t>(n) * 8, what)) return false;
  for (int64_t i = 0; i < n; ++i) out[i] = RawF64();
  return true;
}

bool Reader::CheckMatrixHeader(const char* what, int64_t rows, int64_t cols) {
  const uint64_t at = offset();
  const uint64_t r = U64(what), c = U64(what);
  if (!ok()) return false;
  if (r != static_cast<uint64_t>(rows) || c != static_cast<uint64_t>(cols)) {
    pos_ = at - base_;
    (void)Fail(absl::StrCat(what, " is ", r, " x ", c, ", expected ", rows, " x ", cols, " from the header"));
    return false;
  }
  return Need(static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * 8, what);
}

bool Reader::Reserve(uint64_t bytes, const char* what) {
  if (!ok()) return false;
  if (bytes > budget_) {
    (void)Fail(absl::StrCat(what, " would allocate ", bytes, " bytes, over the allocation budget of ", budget_,
                            " bytes left"));
    return false;
  }
  budget_ -= bytes;
  return true;
}

bool Reader::BeginObject(uint32_t tag, uint32_t max_version, const char* name, uint32_t* version) {
  const uint64_t at = offset();
  const uint32_t found = U32("object tag");
  const uint32_t v = U32("object version");
  const uint64_t length = U64("object length");
  if (!ok()) return false;
  if (found != tag) {
    pos_ = at - base_;
    (void)Fail(absl::StrCat("expected ", name, " (tag ", FourccName(tag), "), found tag ", FourccName(found)));
    return false;
  }
  if (v < 1 || v > max_version) {
    pos_ = at - base_;
    (void)Fail(absl::StrCat(name, " (", FourccName(tag), ") version ", v, " is not supported by this build (reads 1..",
                            max_version, ")"));
    return false;
  }
  if (!Need(length, name)) return false;
  object_ends_.push_back(pos_ + length);
  *version = v;
  return true;
}

bool Reader::EndObject(const char* name) {
  if (!ok()) return false;
  if (object_ends_.empty()) {
    (void)Fail(absl::StrCat("internal: EndObject(", name, ") without BeginObject"));
    return false;
  }
  const uint64_t end = object_ends_.back();
  if (pos_ != end) {
    (void)Fail(absl::StrCat(name, " has ", end - pos_, " unread bytes at its end"));
    return false;
  }
  object_ends_.pop_back();
  return true;
}

}  // namespace cmestream::io
