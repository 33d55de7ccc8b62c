// The names of a small enum's values as one table, so that parsing a name and naming a value
// read the same rows and cannot drift apart (a value added to one direction and not the other).
#pragma once

#include <optional>

#include "absl/strings/string_view.h"

namespace cmestream::service {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `table`, or `fallback` when the table does not list it.
template <class E, size_t N>
const char* NameOf(const EnumName<E> (&table)[N], E value, const char* fallback) {
  for (const EnumName<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return fallback;
}

// The value named `name` in `table`, or nullopt when no row has that name.
template <class E, size_t N>
std::optional<E> ValueOf(const EnumName<E> (&table)[N], absl::string_view name) {
  for (const EnumName<E>& row : table) {
    if (name == row.name) return row.value;
  }
  return std::nullopt;
}

}  // namespace cmestream::service
