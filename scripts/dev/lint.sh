#!/usr/bin/env bash
# clang-tidy gate: runs the checks of .clang-tidy (scripts/dev/tidy.sh) over the translation
# units of core/ and service/ in the compile database and fails when there is any finding.
#
#   scripts/dev/lint.sh                  core/ and service/
#   scripts/dev/lint.sh service          some directories only
#   BUILD_DIR=build-sanitize JOBS=2 scripts/dev/lint.sh
#
# BUILD_DIR (default build) must hold compile_commands.json and the generated protobuf headers
# (any configured build after `cmake --build BUILD --target cmestream_proto`). Slow: 20-60 s per
# file with Eigen, ~0.5-1 GB per job; see tidy.sh for the other variables (JOBS, LOG, FIX=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
DIRS=("$@")
[ ${#DIRS[@]} -eq 0 ] && DIRS=(core service)
out="$(scripts/dev/tidy.sh "${DIRS[@]}")" || { echo "$out"; echo "lint: clang-tidy could not analyze every file" >&2; exit 1; }
echo "$out"
total="$(echo "$out" | awk '/^total:/ {print $2}')"
if [ "${total:-1}" != "0" ]; then
  echo "lint: $total finding(s); details in ${LOG:-${BUILD_DIR:-build}/clang-tidy.log}" >&2
  exit 1
fi
echo "lint: clean (${DIRS[*]})"
