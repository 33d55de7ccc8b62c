# ThreadSanitizer + UndefinedBehaviorSanitizer build (CMESTREAM_SANITIZE=ON; scripts/sanitize.sh
# configures it in build-sanitize/ and runs the threaded tests).
#
# -fno-sanitize=vptr: UBSan's vptr check probes memory with a pipe inside the sanitizer runtime,
#   which TSan (clang 14) reports as a race on every std::thread start; the remaining UBSan
#   checks (overflow, shifts, bounds, null, alignment, bool/enum loads, ...) stay on.
# -fno-sanitize-recover=undefined: undefined behaviour aborts the test instead of a log line.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "CMESTREAM_SANITIZE needs clang: configure with -DCMAKE_CXX_COMPILER=clang++")
endif()
if(CMESTREAM_FUZZ)
  message(FATAL_ERROR "CMESTREAM_SANITIZE and CMESTREAM_FUZZ (ASan) cannot be combined")
endif()
add_compile_options(-fsanitize=thread,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=thread,undefined -fno-sanitize=vptr)

# Debian's Abseil is not instrumented, so TSan cannot see absl::Mutex lock and unlock; the
# wrappers in tests/sanitize/absl_mutex_tsan.cc announce them (see that file). They ride on
# absl::synchronization, which every target using absl::Mutex links (directly or through
# gRPC), so every executable of this build gets them.
get_target_property(_absl_include absl::base INTERFACE_INCLUDE_DIRECTORIES)
find_file(_absl_options absl/base/options.h PATHS ${_absl_include} /usr/include NO_DEFAULT_PATH)
file(STRINGS "${_absl_options}" _absl_ns REGEX "^#define ABSL_OPTION_INLINE_NAMESPACE_NAME ")
if(NOT _absl_ns MATCHES "debian3$")
  message(FATAL_ERROR "CMESTREAM_SANITIZE: tests/sanitize/absl_mutex_tsan.cc wraps Abseil's inline namespace "
                      "'debian3' (Debian 12); this Abseil has '${_absl_ns}': update the symbol names there and here")
endif()
set(CMESTREAM_TSAN_WRAPPED_SYMBOLS
  _ZN4absl7debian35Mutex4LockEv
  _ZN4absl7debian35Mutex6UnlockEv
  _ZN4absl7debian35Mutex7TryLockEv
  _ZN4absl7debian35Mutex10ReaderLockEv
  _ZN4absl7debian35Mutex12ReaderUnlockEv
  _ZN4absl7debian35MutexD1Ev
  _ZN4absl7debian35MutexD2Ev
  _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE
  _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE
  _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE)
add_library(cmestream_tsan_absl_mutex STATIC ${PROJECT_SOURCE_DIR}/tests/sanitize/absl_mutex_tsan.cc)
foreach(sym IN LISTS CMESTREAM_TSAN_WRAPPED_SYMBOLS)
  target_link_options(cmestream_tsan_absl_mutex INTERFACE "LINKER:--wrap=${sym}")
endforeach()
set_property(TARGET absl::synchronization APPEND PROPERTY INTERFACE_LINK_LIBRARIES cmestream_tsan_absl_mutex)
message(STATUS "cmestream: ThreadSanitizer + UndefinedBehaviorSanitizer build (absl::Mutex annotated for TSan)")
