#!/usr/bin/env bash
# Runs a VM test (or the guest image build) on one guest kernel: exports
# HZ_GUEST_KERNEL=KERNEL, which every script below honours (build-guest.sh,
# run-guest.sh, run-libvirt-guest.sh). Exits 77 (ctest: skipped), saying why,
# only when Debian's archive had no such kernel for the toolchain root.
# Usage: on_kernel.sh KERNEL VM_DIR COMMAND [ARG]...
set -euo pipefail
export HZ_GUEST_KERNEL=$1
source "$(dirname "$0")/../../vm-images/lib/common.sh"
hz_guest_kernel >/dev/null
dir=$(hz_vm_dir "$2")
shift 2
if why=$(hz_guest_kernel_unavailable "$HZ_GUEST_KERNEL" "$dir"); then
	echo "on_kernel: SKIPPED: no $HZ_GUEST_KERNEL kernel: $why"
	exit 77
fi
echo "on_kernel: guest kernel $HZ_GUEST_KERNEL ($(hz_guest_kernel_version "$HZ_GUEST_KERNEL" "$dir"))"
exec "$@"
