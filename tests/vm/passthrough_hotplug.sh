#!/usr/bin/env bash
# libvirt hostdev hot-plug for real, within CI's time: the emulated GPU server
# of vm-images/run-iommu-host.sh (L1) runs the toolchain root's libvirtd and
# QEMU (the root shared into it read-only over virtio-9p) and harmonaized; a
# tenant VM (L2) with the harmonaize device runs under that libvirtd,
# started paused. hzctl alloc binds two GPU stand-ins to vfio-pci and libvirt
# hot-plugs them into L2's QEMU, hzctl device fail takes one out again and
# publishes the FAILURE event, hzctl release takes out the other. The guest
# script (tests/vm/guest/tests/passthrough_hotplug) checks each step in
# libvirt's live definition, in L2's QEMU (its PCI buses and the vfio groups
# it holds) and in L1's sysfs. vm_passthrough_nested does the same with a
# booted L2 whose driver sees the GPUs and the event, by hand.
# Usage: passthrough_hotplug.sh HARMONAIZED HZCTL VM_DIR OUT_DIR
#   VM_DIR is only read (the toolchain root); the image and logs go to OUT_DIR.
set -euo pipefail
harmonaized=$1 hzctl=$2 HZ_VM_DIR=$3 out=$4
export HZ_TEST=vm_passthrough_hotplug
source "$(dirname "$0")/lib.sh"
source "$HZ_TOP/vm-images/lib/common.sh"
t0=$SECONDS
share=$out/share
rm -rf "$share"
mkdir -p "$share"
l1_initramfs "$harmonaized" "$hzctl" "$out" passthrough_hotplug \
	--kmod 9pnet_virtio --kmod 9p --kmod overlay
hz_libvirt_qemu_conf "$share/qemu.conf"
say "step image took $((SECONDS - t0)) s"

l1_run_libvirt "$out" "$share" passthrough_hotplug 500 512
say "step total took $((SECONDS - t0)) s"
say PASS
