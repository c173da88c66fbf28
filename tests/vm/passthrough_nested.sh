#!/usr/bin/env bash
# Passthrough into a running tenant VM for real: the emulated GPU server of
# vm-images/run-iommu-host.sh (L1) runs the toolchain root's libvirtd and
# QEMU (the root shared into it read-only over virtio-9p) and harmonaized;
# a tenant VM (L2, TCG inside TCG) runs under that libvirtd with the
# harmonaize device and the real driver. hzctl alloc binds GPU stand-ins to
# vfio-pci and libvirt hot-plugs them into L2; hzctl device fail takes one
# out of L2, whose tenant gets the FAILURE event through the driver; hzctl
# release takes out the rest. The guest scripts are
# tests/vm/guest/tests/passthrough_nested (L1) and nested_tenant (L2); here
# L2's topology summary is checked to be coarse.
# Usage: passthrough_nested.sh HARMONAIZED HZCTL HZ VM_DIR OUT_DIR
#   VM_DIR is only read (the toolchain root, bookworm's driver); the images
#   and logs go to OUT_DIR.
set -euo pipefail
harmonaized=$1 hzctl=$2 hz_tool=$3 HZ_VM_DIR=$4 out=$5
export HZ_TEST=vm_passthrough_nested
source "$(dirname "$0")/lib.sh"
source "$HZ_TOP/vm-images/lib/common.sh"
t0=$SECONDS
driver=$(hz_guest_dir "$HZ_VM_DIR" "$(hz_guest_kernel)")/harmonaize.ko
[ -f "$driver" ] || fail "no $driver (vm-images/build-guest.sh)"
share=$out/share
rm -rf "$share"
mkdir -p "$share"
# The guests get stripped copies: their initramfs lives in their RAM.
for p in "$harmonaized" "$hzctl" "$hz_tool"; do strip -o "$out/$(basename "$p")" "$p"; done
# L2: the driver, hz (with libharmonaize) and its test.
"$HZ_TOP/vm-images/build-initramfs.sh" --dir "$HZ_VM_DIR" --out "$share/l2-initrd.gz" \
	--module "$driver" --dynamic "$out/hz" --test "$HZ_TOP/tests/vm/guest/tests/nested_tenant"
# L1: vfio, 9p and overlay for the shared root, harmonaized and hzctl.
"$HZ_TOP/vm-images/build-initramfs.sh" --dir "$HZ_VM_DIR" --out "$out/initramfs.gz" \
	--kmod vfio-pci --kmod vfio_iommu_type1 --kmod e1000e --kmod 9pnet_virtio --kmod 9p --kmod overlay \
	--dynamic "$out/harmonaized" --dynamic "$out/hzctl" \
	--test "$HZ_TOP/tests/vm/guest/tests/passthrough_nested"
cp "$(hz_guest_kernel_image "$HZ_VM_DIR" l2)" "$share/vmlinuz"
hz_libvirt_qemu_conf "$share/qemu.conf"
say "step image took $((SECONDS - t0)) s"

t1=$SECONDS
log=$out/passthrough-nested-guest.log
rc=0
"$HZ_TOP/vm-images/run-iommu-host.sh" --dir "$HZ_VM_DIR" --name passthrough-nested \
	--initrd "$out/initramfs.gz" --test passthrough_nested --timeout 1700 --log "$log" \
	--node-mib 768 --share-root --share "$share" || rc=$?
say "step guest took $((SECONDS - t1)) s"
grep '^passthrough_nested: step' "$log" | tr -d '\r' | sed "s/^/[$HZ_TEST] guest /" || true
[ "$rc" -eq 0 ] || fail "the guest test failed (exit $rc; log: $log, L2's files: $share)"
expect_line "$log" '^HZ-RESULT: PASS passthrough_nested' "L1's result"
expect_line "$share/l2-console.log" '^HZ-RESULT: PASS nested_tenant' "L2's result"
expect_line "$share/l2-qemu.log" 'vhost-user-test-device-pci' "L2's QEMU ran the device"
expect_line "$share/harmonaized.log" 'front-end connected' "harmonaized: L2 connected"

python3 - "$share/l2-console.log" <<'PY' || fail "L2's topology summary is not coarse"
import re, sys

text = open(sys.argv[1], errors="replace").read().replace("\r", "")

def dump(name):
    return text.split("HZ-DUMP-BEGIN %s\n" % name, 1)[1].split("HZ-DUMP-END %s" % name, 1)[0]

def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)

for name in ("topology-allocated", "topology-after-failure"):
    summary = dump(name)
    print("%s:\n%s" % (name, summary.rstrip()))
    check(not re.search(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", summary),
          "%s: no PCI addresses" % name)
    check("emu-gpu-server" not in summary, "%s: no host name" % name)
PY
say "step total took $((SECONDS - t0)) s"
say PASS
