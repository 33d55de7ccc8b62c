#!/usr/bin/env bash
# Runs clang-tidy (checks in .clang-tidy) over the translation units of the given source
# directories and prints the number of findings per check.
#
#   scripts/dev/tidy.sh [DIR...]        default DIR: core
#
# Environment:
#   BUILD_DIR   build directory with compile_commands.json (default: build). Configure one with
#               `cmake -S . -B build -G Ninja` and build the `cmestream_proto` target first, so
#               the generated protobuf headers exist (service/ and client/ include them).
#   JOBS        parallel clang-tidy processes (default: 1; each takes ~0.5-1 GB and 20-60 s
#               per file with Eigen).
#   CLANG_TIDY  clang-tidy binary (default: clang-tidy; Debian: apt-get install -y clang-tidy).
#   LOG         where the full output goes (default: $BUILD_DIR/clang-tidy.log).
#   FIX=1       apply the checks' fix-its (review the diff; run it on a clean tree).
#   SUMMARY_ONLY=1  do not run clang-tidy; summarize the existing $LOG.
#
# Exit status: 0 when every unit was analyzed (findings or not); 1 if clang-tidy failed on a
# unit (a compile error: listed at the end); 2 if it could not start. Findings do not fail the
# script: the checks are not enforced yet.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-1}"
CLANG_TIDY="${CLANG_TIDY:-clang-tidy}"
LOG="${LOG:-$BUILD_DIR/clang-tidy.log}"
DIRS=("$@")
[ ${#DIRS[@]} -eq 0 ] && DIRS=(core)

if ! command -v "$CLANG_TIDY" >/dev/null; then
  echo "tidy.sh: $CLANG_TIDY not found (Debian: apt-get install -y clang-tidy)" >&2
  exit 2
fi
if [ ! -f "$BUILD_DIR/compile_commands.json" ]; then
  echo "tidy.sh: $BUILD_DIR/compile_commands.json not found; run" >&2
  echo "  cmake -S . -B $BUILD_DIR -G Ninja && cmake --build $BUILD_DIR --target cmestream_proto" >&2
  exit 2
fi

# Translation units from the compilation database under the requested directories (so the
# flags are exactly the build's; headers are checked through the units that include them).
mapfile -t FILES < <(/usr/bin/python3 - "$ROOT" "$BUILD_DIR/compile_commands.json" "${DIRS[@]}" <<'PY'
import json, os, sys
root, db, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
prefixes = [os.path.join(root, d.rstrip("/")) + "/" for d in dirs]
seen = set()
for entry in json.load(open(db)):
    f = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    if any(f.startswith(p) for p in prefixes) and f not in seen:
        seen.add(f)
        print(f)
PY
)
if [ ${#FILES[@]} -eq 0 ]; then
  echo "tidy.sh: no translation units under ${DIRS[*]} in $BUILD_DIR/compile_commands.json" >&2
  exit 2
fi

if [ "${SUMMARY_ONLY:-0}" != 1 ]; then
  EXTRA=(--quiet -p "$BUILD_DIR" --extra-arg=-Wno-unknown-warning-option)
  [ "${FIX:-0}" = 1 ] && EXTRA+=(--fix)
  echo "tidy.sh: ${#FILES[@]} files under ${DIRS[*]}, $JOBS job(s), log $LOG" >&2
  start=$(date +%s)
  # clang-tidy exits non-zero when the compiler reports errors; keep going and report them.
  printf '%s\n' "${FILES[@]}" |
    xargs -P "$JOBS" -n 1 bash -c '"$0" "$@" 2>&1 || echo "tidy.sh: clang-tidy failed on ${*: -1}"' \
      "$CLANG_TIDY" "${EXTRA[@]}" >"$LOG"
  echo "tidy.sh: done in $(( $(date +%s) - start )) s" >&2
fi

# A finding is "path:line:col: warning: message [check-name]"; a header included by several
# units is reported once per unit, so count unique (location, check) pairs.
findings() {
  { grep -E '^/.*:[0-9]+:[0-9]+: (warning|error): .*\[[a-z0-9.,-]+\]$' "$LOG" || true; } |
    sed -E 's/^([^ ]+): (warning|error): .*\[([^]]+)\]$/\1 \3/' | sort -u
}
echo "findings per check (unique locations):"
findings | awk '{print $2}' | sort | uniq -c | sort -rn
echo "total: $(findings | wc -l)"
if grep -q '^tidy.sh: clang-tidy failed' "$LOG"; then
  grep '^tidy.sh: clang-tidy failed' "$LOG" >&2
  exit 1
fi
