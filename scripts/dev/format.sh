#!/usr/bin/env bash
# clang-format (.clang-format: Google style, 120 columns) over the C++ sources tracked by git.
#
#   scripts/dev/format.sh                 rewrites every file in place (core service client tests)
#   scripts/dev/format.sh service/storage/wal.cc  only these files or directories
#   CHECK=1 scripts/dev/format.sh         changes nothing; lists the files that would change and
#                                         exits 1 if there are any
#
# The tree was formatted once in a formatting-only commit; format what you touch. ctest's
# clang_format_check runs CHECK=1 over the tree, so CI fails on an unformatted file. Generated code (build*/) is never formatted.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "format.sh: $CLANG_FORMAT not found (Debian: apt-get install -y clang-format)" >&2
  exit 2
fi
PATHS=("$@")
[ ${#PATHS[@]} -eq 0 ] && PATHS=(core service client tests)
mapfile -t FILES < <(git ls-files -- "${PATHS[@]}" | grep -E '\.(cc|h|cpp|hpp)$' || true)
if [ ${#FILES[@]} -eq 0 ]; then
  echo "format.sh: no C++ files under ${PATHS[*]}" >&2
  exit 2
fi
if [ "${CHECK:-0}" = 1 ]; then
  changed=0
  for f in "${FILES[@]}"; do
    if ! "$CLANG_FORMAT" --style=file "$f" | cmp -s - "$f"; then
      echo "$f"
      changed=$((changed + 1))
    fi
  done
  echo "format.sh: $changed of ${#FILES[@]} files would change" >&2
  [ "$changed" -eq 0 ]
else
  "$CLANG_FORMAT" --style=file -i "${FILES[@]}"
  echo "format.sh: formatted ${#FILES[@]} files" >&2
fi
