#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, then
#   1. default preset (RelWithDebInfo, -Werror): every label — unit, integration, vm
#   2. asan preset (AddressSanitizer + UBSan): unit and integration again
#   3. fuzz preset (clang + libFuzzer): a bounded smoke run of every fuzz target
# Any failing test, or a label with no tests at all, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc)
# Sanitizer reports must fail loudly and say where.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

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

stage() { echo; echo "==== $* ($(date -u +%H:%M:%S))"; }

stage "default build"
cmake --preset default >/dev/null
cmake --build --preset default -j "$jobs"
for l in unit integration vm; do require_label default "$l"; done
stage "default tests: unit, integration"
ctest --preset default -j "$jobs" -LE '^vm$'
# Guests run under TCG and use every core: one at a time.
stage "default tests: vm"
ctest --preset default -L '^vm$'

stage "asan build"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
for l in unit integration; do require_label asan "$l"; done
stage "asan tests: unit, integration"
ctest --preset asan -j "$jobs"

stage "fuzz build"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
require_label fuzz fuzz-smoke
stage "fuzz smoke"
ctest --preset fuzz -j "$jobs"

stage "all test stages passed"
