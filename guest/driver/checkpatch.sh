#!/usr/bin/env bash
# Runs the kernel's checkpatch.pl (--strict) over the driver. Debian's kernel
# headers do not ship it; it is looked for in the headers, then in an
# unpacked or packed linux-source (apt-get install linux-source-6.1).
# Usage: guest/driver/checkpatch.sh [CHECKPATCH_PL]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cp=${1:-}
if [ -z "$cp" ]; then
	kver=$("$here/../../scripts/guest-kernel-version.sh")
	for c in /lib/modules/"$kver"/build/scripts/checkpatch.pl /usr/src/linux-source-*/scripts/checkpatch.pl; do
		[ -f "$c" ] && cp=$c && break
	done
fi
if [ -z "$cp" ]; then
	tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | head -n1 || true)
	[ -n "$tarball" ] || { echo "checkpatch.sh: checkpatch.pl not found (install linux-source-6.1)" >&2; exit 77; }
	cache=${TMPDIR:-/tmp}/hz-checkpatch
	mkdir -p "$cache"
	base=$(basename "$tarball" .tar.xz)
	if [ ! -f "$cache/$base/scripts/checkpatch.pl" ]; then
		# Unpacked aside and moved into place: concurrent runs never see half a tree.
		tmp=$(mktemp -d "$cache/unpack.XXXXXX")
		tar -xJf "$tarball" -C "$tmp" "$base/scripts/checkpatch.pl" "$base/scripts/spelling.txt" \
			"$base/scripts/const_structs.checkpatch"
		mv -T "$tmp/$base" "$cache/$base" 2>/dev/null || true
		rm -rf "$tmp"
	fi
	cp=$cache/$base/scripts/checkpatch.pl
fi
cd "$here"
# hz_compat.h is the one file that tests LINUX_VERSION_CODE, which in-tree
# code never needs (checkpatch also takes that name for a constant on the
# left of a comparison); those two checks are left out for it alone.
"$cp" --no-tree --strict --quiet -f hz_*.c hz_drv.h test/*.c Kbuild
"$cp" --no-tree --strict --quiet --ignore LINUX_VERSION_CODE,CONSTANT_COMPARISON -f hz_compat.h
# User-space headers cannot use BIT(); that check is left out for them.
"$cp" --no-tree --strict --quiet --ignore BIT_MACRO -f ../../include/uapi/harmonaize/harmonaize_uapi.h
echo "checkpatch.sh: clean ($cp)"
