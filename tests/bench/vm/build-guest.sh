#!/usr/bin/env bash
# Builds the benchmark's guest image: hz_vmbench (libharmonaize over the
# driver transport, and Gloo, linked dynamically; its shared libraries go into
# the image), the benchmark's guest script, the driver and hz_drvtest from
# vm-images/build-guest.sh, and virtio_net for the guests' network.
# Usage: tests/bench/vm/build-guest.sh VM_DIR
# Result: VM_DIR/images/initramfs-bench.gz
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
dir=$1
out=$dir/bench
mkdir -p "$out"
[ -f /usr/include/gloo/allreduce.h ] || { echo "build-guest.sh: libgloo-dev is not installed" >&2; exit 1; }
# The driver of the guest kernel the image is for ($HZ_GUEST_KERNEL).
source "$top/vm-images/lib/common.sh"
kmods=$(hz_guest_dir "$dir" "$(hz_guest_kernel)")
if [ ! -f "$kmods/harmonaize.ko" ] || [ ! -x "$dir/guest/hz_drvtest" ]; then
	"$top/vm-images/build-guest.sh" "$dir"
fi

lib=$top/guest/lib/src
src=("$here/guest/hz_vmbench.cc" "$lib/comm.cc" "$lib/control.cc" "$lib/device.cc" "$lib/transport_driver.cc")
if [ ! -x "$out/hz_vmbench" ] || [ -n "$(find "${src[@]}" "$lib"/*.h "$top/include/harmonaize" \
	"$top/protocol/include/protocol/harmonaize.h" "$top/include/uapi" -newer "$out/hz_vmbench")" ]; then
	g++ -O2 -std=c++20 -Wall -Wextra -Werror -pthread -I"$top/protocol/include" -I"$top/include" -I"$top/include/uapi" -I"$lib" \
		"${src[@]}" -lgloo -o "$out/hz_vmbench.tmp"
	mv "$out/hz_vmbench.tmp" "$out/hz_vmbench"
fi
"$top/vm-images/build-initramfs.sh" --dir "$dir" --out "$dir/images/initramfs-bench.gz" \
	--kmod virtio_net --module "$kmods/harmonaize.ko" --program "$dir/guest/hz_drvtest" \
	--dynamic "$out/hz_vmbench" --test "$here/guest/vm_allreduce_bench"
