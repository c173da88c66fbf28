#!/usr/bin/env bash
# Builds what runs inside the test guest and packs it into the initramfs:
#   - harmonaize.ko (guest/driver) and hz_echo_test.ko (guest/driver/test),
#     built against the guest kernel's headers with W=1 and sparse (C=1);
#     any warning fails;
#   - hz_drvtest, the static user-space exerciser of /dev/harmonaizeN;
#   - hz_libtest, libharmonaize (guest/lib, driver transport) linked statically;
#   - the guest halves of the VM tests (tests/vm/guest/tests/*).
#
# Usage: vm-images/build-guest.sh [DIR]   (DIR as for build-toolchain.sh)
# The guest kernel is $HZ_GUEST_KERNEL (bookworm, trixie or trixie-backports;
# vm-images/lib/common.sh), bookworm when unset. The modules of the two newer
# kernels are built inside the toolchain root, which has their headers.
# Results: DIR/guest/{hz_drvtest,hz_libtest} for every kernel;
#          bookworm: DIR/guest/{harmonaize.ko,hz_echo_test.ko}, DIR/images/initramfs.gz
#          others:   DIR/guest-KERNEL/{harmonaize.ko,hz_echo_test.ko},
#                    DIR/images/initramfs-KERNEL.gz
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

dir=$(hz_vm_dir "${1:-}")
kernel=$(hz_guest_kernel)
kver=$(hz_guest_kernel_version "$kernel" "$dir")
root=$(hz_guest_kernel_root "$kernel" "$dir")
kmods=$(hz_guest_dir "$dir" "$kernel")
out=$dir/guest
top=$HZ_REPO_ROOT
mkdir -p "$out" "$kmods"

"$top/guest/driver/build.sh" "$kmods" "$kver" ${root:+"$root"} >&2

gcc -static -O2 -Wall -Wextra -Werror -std=gnu11 -I"$top/protocol/include/protocol" -I"$top/include/uapi" \
	"$top/tests/vm/guest/hz_drvtest.c" -o "$out/hz_drvtest.tmp"
mv "$out/hz_drvtest.tmp" "$out/hz_drvtest"

# The library's sources without the virtio-user transport (the test program
# stands in for it); rebuilt only when an input changed.
lib=$top/guest/lib/src
libtest_src=("$top/tests/vm/guest/hz_libtest.cc" "$lib/comm.cc" "$lib/control.cc" "$lib/device.cc"
	"$lib/transport_driver.cc")
if [ ! -x "$out/hz_libtest" ] || [ -n "$(find "${libtest_src[@]}" "$lib"/*.h "$top/include/harmonaize" \
	"$top/protocol/include/protocol/harmonaize.h" "$top/include/uapi" -newer "$out/hz_libtest")" ]; then
	g++ -static -O2 -std=c++20 -Wall -Wextra -Werror -pthread -I"$top/protocol/include" -I"$top/include" -I"$top/include/uapi" -I"$lib" \
		"${libtest_src[@]}" -o "$out/hz_libtest.tmp"
	mv "$out/hz_libtest.tmp" "$out/hz_libtest"
fi

tests=()
for t in "$top"/tests/vm/guest/tests/*; do
	[ -f "$t" ] && tests+=(--test "$t")
done
"$(dirname "$0")/build-initramfs.sh" --dir "$dir" --kver "$kver" --root "$root" \
	--out "$(hz_guest_initramfs "$dir" "$kernel")" \
	--module "$kmods/harmonaize.ko" --module "$kmods/hz_echo_test.ko" \
	--program "$out/hz_drvtest" --program "$out/hz_libtest" "${tests[@]}"
hz_log "guest ready for $kernel ($kver)"
