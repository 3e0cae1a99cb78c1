#!/usr/bin/env bash
# clang-format (14, Debian 12's) over our C++: src/, tests/, bench/, fuzz/, tools/ (.clang-format).
#   tools/format.sh          rewrites the files in place
#   tools/format.sh --check  changes nothing; lists the files that differ and exits 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."
formatter=$(command -v clang-format-14 || command -v clang-format) || { echo "format.sh: clang-format not found" >&2; exit 2; }
mapfile -t files < <(git ls-files -co --exclude-standard -- 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'tests/*.h' 'bench/*.cpp' \
                       'fuzz/*.cpp' 'fuzz/*.h' 'tools/*.cpp')
if [ "${1:-}" = --check ]; then
  differ=0
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    "$formatter" --style=file "$f" | cmp -s - "$f" || { echo "not formatted: $f (tools/format.sh fixes it)"; differ=1; }
  done
  exit $differ
fi
for f in "${files[@]}"; do [ -f "$f" ] && "$formatter" --style=file -i "$f"; done
