#!/usr/bin/env bash
# The guest driver against one guest kernel's headers, booting nothing:
# guest/driver/build.sh (W=1 and sparse, any warning fails) for bookworm on the
# host, and for trixie and trixie-backports inside the toolchain root, where
# their headers and compiler are. An API break shows here first.
# Exits 77 (ctest: skipped) only when Debian's archive has no such kernel.
# Usage: driver_kbuild.sh KERNEL OUT_DIR VM_DIR
set -euo pipefail
kernel=$1 out=$2
source "$(dirname "$0")/../../vm-images/lib/common.sh"
dir=$(hz_vm_dir "$3")
if why=$(hz_guest_kernel_unavailable "$kernel" "$dir"); then
	echo "driver_kbuild: SKIPPED: no $kernel kernel to build for: $why"
	exit 77
fi
kver=$(hz_guest_kernel_version "$kernel" "$dir")
root=$(hz_guest_kernel_root "$kernel" "$dir")
"$HZ_REPO_ROOT/guest/driver/build.sh" "$out" "$kver" ${root:+"$root"}
