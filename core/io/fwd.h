// Forward declarations of the binary reader and writer (core/io/binary_io.h), for the headers of
// the estimators that declare Serialize(io::Writer&) / Deserialize(io::Reader&) without pulling
// the whole codec into every user.
#pragma once

namespace cmestream::io {
class Reader;
class Writer;
}  // namespace cmestream::io
