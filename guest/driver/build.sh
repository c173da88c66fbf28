#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds harmonaize.ko and the test module hz_echo_test.ko against a kernel's
# headers with W=1 and sparse (C=1), from copies of the sources (Kbuild
# writes next to them). Any compiler or sparse warning fails the build.
#
# Usage: guest/driver/build.sh OUT_DIR [KERNEL_VERSION [ROOT]]
#   KERNEL_VERSION defaults to the guest kernel (scripts/guest-kernel-version.sh).
#   ROOT is a Debian root holding that kernel's headers and the compiler and
#   Kbuild tools they go with; the build then runs inside it (chroot, as
#   root), with the source tree and OUT_DIR mounted at their own paths. That
#   is how Debian 13's kernels are built from a Debian 12 host, whose gcc 12
#   and glibc cannot run their Kbuild (vm-images/build-toolchain.sh makes the
#   root). Without ROOT, the host's /lib/modules/KERNEL_VERSION/build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
kver=${2:-$("$top/scripts/guest-kernel-version.sh")}
root=${3:-}
kdir=/lib/modules/$kver/build
if [ -n "$root" ]; then
	root=$(cd "$root" && pwd)
	[ "$(id -u)" -eq 0 ] || { echo "build.sh: building inside $root needs root (chroot)" >&2; exit 1; }
	[ -e "$root/usr/src/linux-headers-$kver/Makefile" ] ||
		{ echo "build.sh: no headers for $kver in $root" >&2; exit 1; }
	have_sparse() { [ -x "$root/usr/bin/sparse" ]; }
	sparse_version() { chroot "$root" sparse --version 2>&1; }
else
	[ -e "$kdir/Makefile" ] || { echo "build.sh: no headers in $kdir" >&2; exit 1; }
	have_sparse() { command -v sparse >/dev/null; }
	sparse_version() { sparse --version 2>&1; }
fi
sparse=C=1
have_sparse || { echo "build.sh: sparse not installed, building without it" >&2; sparse=; }

# make, on the host or inside ROOT; paths mean the same in both.
kmake() {
	if [ -z "$root" ]; then
		make "$@"
		return
	fi
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private bash -euo pipefail -c '
		root=$1 top=$2 out=$3; shift 3
		mount --bind /dev "$root/dev"
		mount -t proc proc "$root/proc"
		for d in "$top" "$out"; do
			mkdir -p "$root$d"
			mount --bind "$d" "$root$d"
		done
		exec chroot "$root" "$@"
	' kmake "$root" "$top" "$out" make "$@"
}

checked=W=1${sparse:+, sparse}
build_module() {
	local name=$1 src=$2 work=$out/$1
	mkdir -p "$work"
	rm -f "$work"/*.c "$work"/*.h "$work/Kbuild"
	cp "$src"/Kbuild "$src"/*.c "$work/"
	cp "$src"/*.h "$work/" 2>/dev/null || true
	if ! kmake -C "$kdir" M="$work" HZ_PROTOCOL_DIR="$top/protocol/include/protocol" HZ_UAPI_DIR="$top/include/uapi" W=1 $sparse modules >"$work/build.log" 2>&1; then
		cat "$work/build.log" >&2
		echo "build.sh: building $name for $kver failed" >&2
		exit 1
	fi
	if grep -E 'warning:|error:' "$work/build.log" >&2; then
		echo "build.sh: $name: warnings in the kernel build for $kver" >&2
		exit 1
	fi
	# A kernel's Kbuild may turn the checker down and build without it: newer
	# kernels (trixie-backports' 7.3 is one) accept only a sparse that knows
	# __typeof_unqual__, which Debian 13's 0.6.4 does not (Debian's headers
	# for 7.3 also lack the scripts/checker-valid.sh that asks). This says so.
	if [ -n "$sparse" ] && grep -q 'C=1 specified, but .* is not available or not up to date' "$work/build.log"; then
		echo "build.sh: $name: the $kver Kbuild turned sparse $(sparse_version) down; built without the sparse check" >&2
		checked="W=1; sparse turned down by this kernel's Kbuild"
	fi
	cp "$work/$name.ko" "$out/$name.ko"
}

build_module harmonaize "$here"
build_module hz_echo_test "$here/test"
echo "build.sh: harmonaize.ko and hz_echo_test.ko built for $kver${root:+ in $root} ($checked), no warnings"
