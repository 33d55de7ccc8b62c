#!/usr/bin/env bash
# Configures and builds cmestream into ${BUILD_DIR:-build}: Release (-O2, no debug info), Ninja,
# warnings as errors (CMESTREAM_WERROR; WERROR=0 turns it off), ccache when installed.
#   scripts/build.sh [CMAKE_ARGS...]                 everything (what scripts/test.sh builds)
#   TARGETS="cmestreamd cmestream" scripts/build.sh  only these targets (what scripts/demo.sh builds)
#   CONFIGURE_ONLY=1 scripts/build.sh                configure, do not build
# scripts/demo.sh and scripts/test.sh build the same type with the same flags into the same
# directory, so the tests reuse every object the demo compiled. BUILD_TYPE=RelWithDebInfo (in
# another BUILD_DIR) for a build a debugger can read.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-2}"
werror=ON
[ "${WERROR:-1}" = 0 ] && werror=OFF
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DCMESTREAM_WERROR="$werror" \
  "$@" >/dev/null
[ -n "${CONFIGURE_ONLY:-}" ] && exit 0
# Progress: ninja's [done/total] and the seconds since the build started.
export NINJA_STATUS="${NINJA_STATUS:-[%f/%t, %es] }"
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$JOBS" ${TARGETS:+--target $TARGETS}
