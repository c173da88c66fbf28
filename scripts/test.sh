#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, then
#   1. default preset (RelWithDebInfo, -Werror): unit, integration, then vm and
#      packages (the .deb packages installed into a clean Debian 12 root)
#   2. asan preset (AddressSanitizer + UBSan): unit and integration again
#   3. fuzz preset (clang + libFuzzer): a bounded smoke run of every fuzz target
# Any failing test, or a label with no tests at all, fails the run.
#
# Long runs carry labels of their own and stay out of this command unless
# --full is given (README.md, "Testing"): soak (the chaos soak's long run),
# vm-kernels (every vm test on every guest kernel) and nested (guests inside
# an emulated server). Their bounded smoke versions run here.
#
# Usage: scripts/test.sh [--full]
set -euo pipefail
cd "$(dirname "$0")/.."

full=0
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac

scripts/install-deps.sh

jobs=$(nproc)
# Sanitizer reports must fail loudly and say where.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Objects compiled by any earlier run, in any folder, are reused
# (cmake/HarmonaizeCcache.cmake says why this is safe).
# Depend mode takes the headers an object needs from the compiler's own -MD
# list, so a miss compiles once instead of preprocessing first to look again.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G} CCACHE_DEPEND=1

# Labels run only by hand (or with --full).
by_hand='^(soak|vm-kernels|nested)$'

# A test group must never vanish silently because something failed to build or register.
require_label() {
  local preset=$1 label=$2
  local n
  n=$(ctest --preset "$preset" -N -L "^${label}\$" 2>/dev/null | sed -n 's/^Total Tests: //p')
  if [ -z "$n" ] || [ "$n" -eq 0 ]; then
    echo "test.sh: preset $preset has no tests labelled '$label'" >&2
    exit 1
  fi
  echo "test.sh: preset $preset: $n tests labelled $label"
}

t0=$SECONDS
stage_start=$SECONDS
stage_name=
timings=()
stage() {
  if [ -n "$stage_name" ]; then timings+=("$(printf '%5d s  %s' $((SECONDS - stage_start)) "$stage_name")"); fi
  stage_name=$*
  stage_start=$SECONDS
  echo
  echo "==== $* ($(date -u +%H:%M:%S))"
}
summary() {
  stage "done"
  echo "test.sh: stage times"
  printf '  %s\n' "${timings[@]}"
  printf '  %5d s  total\n' $((SECONDS - t0))
  command -v ccache >/dev/null && ccache --show-stats 2>/dev/null | sed -n 's/^ *\(Hits\|Misses\):/  ccache \1:/p' || true
}

stage "default build"
cmake --preset default >/dev/null
cmake --build --preset default -j "$jobs"
for l in unit integration vm packages; do require_label default "$l"; done
stage "default tests: unit, integration"
ctest --preset default -j "$jobs" -L '^(unit|integration)$' -LE "$by_hand"
# Guests run under TCG and use every core: one at a time. The packages test
# (about 2 minutes cold, debootstrap included) runs its apt and its own build
# there too.
stage "default tests: vm, packages"
ctest --preset default -L '^(vm|packages)$' -LE "$by_hand"
if [ "$full" -eq 1 ]; then
  stage "default tests: by-hand labels (soak, vm-kernels, nested)"
  ctest --preset default -L "$by_hand"
fi

stage "asan build"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
for l in unit integration; do require_label asan "$l"; done
stage "asan tests: unit, integration"
ctest --preset asan -j "$jobs" -LE "$by_hand"

stage "fuzz build"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
require_label fuzz fuzz-smoke
stage "fuzz smoke"
ctest --preset fuzz -j "$jobs"

summary
echo "test.sh: all test stages passed"
