#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds harmonaize.ko and the test module hz_echo_test.ko against the guest
# kernel's headers with W=1 and sparse (C=1), from copies of the sources (Kbuild
# writes next to them). Any compiler or sparse warning fails the build.
# Usage: guest/driver/build.sh OUT_DIR [KERNEL_VERSION]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$1
kver=${2:-$("$top/scripts/guest-kernel-version.sh")}
kdir=/lib/modules/$kver/build
sparse=C=1
command -v sparse >/dev/null || { echo "build.sh: sparse not installed, building without it" >&2; sparse=; }
mkdir -p "$out"

build_module() {
	local name=$1 src=$2 work=$out/$1
	mkdir -p "$work"
	rm -f "$work"/*.c "$work"/*.h "$work/Kbuild"
	cp "$src"/Kbuild "$src"/*.c "$work/"
	cp "$src"/*.h "$work/" 2>/dev/null || true
	if ! make -C "$kdir" M="$work" HZ_PROTOCOL_DIR="$top/protocol/include/protocol" W=1 $sparse modules >"$work/build.log" 2>&1; then
		cat "$work/build.log" >&2
		echo "build.sh: building $name failed" >&2
		exit 1
	fi
	if grep -E 'warning:|error:' "$work/build.log" >&2; then
		echo "build.sh: $name: warnings in the kernel build" >&2
		exit 1
	fi
	cp "$work/$name.ko" "$out/$name.ko"
}

build_module harmonaize "$here"
build_module hz_echo_test "$here/test"
echo "build.sh: harmonaize.ko and hz_echo_test.ko built for $kver (W=1${sparse:+, sparse}), no warnings"
