#!/usr/bin/env bash
# Builds the compile-only module against the guest kernel's headers with W=1.
# Usage: build.sh SOURCE_ROOT WORK_DIR
set -euo pipefail
src=$1
work=$2
ver=$("$src/scripts/guest-kernel-version.sh")
rm -rf "$work" && mkdir -p "$work"
cp "$(dirname "$0")/hz_header_check.c" "$work/"
echo "obj-m := hz_header_check.o" > "$work/Kbuild"
echo "ccflags-y := -I$src/protocol/include/protocol -Werror" >> "$work/Kbuild"
make -s -C "/lib/modules/$ver/build" M="$work" W=1 modules 2>&1 | tee "$work/build.log"
test -f "$work/hz_header_check.ko"
if grep -E 'warning:' "$work/build.log"; then
  echo "protocol_kernel_build: warnings in the kernel build" >&2
  exit 1
fi
echo "protocol_kernel_build: built against $ver"
