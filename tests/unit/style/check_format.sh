#!/usr/bin/env bash
# Usage: check_format.sh CLANG_FORMAT SOURCE_ROOT
# Fails, naming the files, when any tracked C/C++ file differs from its
# clang-format rendering.
set -euo pipefail
clang_format=$1
cd "$2"
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.hpp')
if [ "${#files[@]}" -eq 0 ]; then
  echo "check_format: no sources found (not a git checkout?)" >&2
  exit 1
fi
"$clang_format" --dry-run --Werror "${files[@]}"
echo "check_format: ${#files[@]} files formatted"
