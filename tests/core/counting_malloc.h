// A malloc/calloc/realloc that counts calls, for the tests that prove a hot path allocation-free
// (test_*_allocations.cc). counting_malloc.cc interposes the C allocator for the whole binary, so
// it is linked only into those test binaries.
#pragma once

namespace cmestream::testing {

// Calls of malloc, calloc and realloc since the process started (operator new included: it
// allocates through malloc).
long AllocationCount();

}  // namespace cmestream::testing
