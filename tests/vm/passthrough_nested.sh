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
# L2's topology summary, dumped with both GPUs and after the failure, is
# checked against the layout L1's inventory shows (the GPUs' PCIe switches)
# and to carry no PCI address or host name.
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
# L2 gets a stripped copy: its initramfs lives in its RAM.
strip -o "$out/hz" "$hz_tool"
# L2: the driver, hz (with libharmonaize) and its test.
"$HZ_TOP/vm-images/build-initramfs.sh" --dir "$HZ_VM_DIR" --out "$share/l2-initrd.gz" \
	--module "$driver" --dynamic "$out/hz" --test "$HZ_TOP/tests/vm/guest/tests/nested_tenant"
# L1: 9p and overlay for the shared root.
l1_initramfs "$harmonaized" "$hzctl" "$out" passthrough_nested \
	--kmod 9pnet_virtio --kmod 9p --kmod overlay
cp "$(hz_guest_kernel_image "$HZ_VM_DIR" l2)" "$share/vmlinuz"
hz_libvirt_qemu_conf "$share/qemu.conf"
say "step image took $((SECONDS - t0)) s"

l1_run_libvirt "$out" "$share" passthrough_nested 1700 768
expect_line "$share/l2-console.log" '^HZ-RESULT: PASS nested_tenant' "L2's result"
expect_line "$share/harmonaized.log" 'front-end connected' "harmonaized: L2 connected"

python3 - "$share" <<'PY' || fail "L2's topology summary is not the allocation's"
import json, os, re, sys

share = sys.argv[1]
text = open(os.path.join(share, "l2-console.log"), errors="replace").read().replace("\r", "")

def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)

def dump(name):
    begin, end = "HZ-DUMP-BEGIN topology-%s\n" % name, "HZ-DUMP-END topology-%s" % name
    check(begin in text and end in text, "L2 dumped its topology: %s" % name)
    return text.split(begin, 1)[1].split(end, 1)[0]

def tenant_gpus(name):
    """The GPUs harmonaized in L1 had allocated to the tenant (acme) when L2 dumped name."""
    inv = json.load(open(os.path.join(share, "inventory-%s.json" % name)))["result"]
    return [d for d in inv if d["kind"] == "gpu" and d["state"] == "allocated" and d.get("tenant") == "acme"]

def expected_summary(gpus):
    """What `hz topology` prints (guest/cli, SPEC 7.7) for GPUs of one host
    without NVLink: a locality group per PCIe switch (a GPU behind none is
    alone), HIGH within a group, MEDIUM (through the host bridge) across."""
    by_switch = {}
    for i, d in enumerate(gpus):
        by_switch.setdefault(d["switch"] or "alone-%d" % i, []).append(d)
    sizes = sorted((len(g) for g in by_switch.values()), reverse=True)
    lines = ["%d devices in %d groups on 1 hosts; across groups: %s, across hosts: none"
             % (len(gpus), len(sizes), "medium" if len(sizes) > 1 else "none")]
    for g, n in enumerate(sizes):
        lines.append("  group %d: %d GPUs, 0 NICs, %s bandwidth, host 0" % (g, n, "high" if n > 1 else "none"))
    index = 0
    for g, n in enumerate(sizes):
        for _ in range(n):
            lines.append("  gpu %d in group %d" % (index, g))
            index += 1
    return "\n".join(lines) + "\n", len(sizes)

allocated = tenant_gpus("allocated")
after = tenant_gpus("after-failure")
check(len(allocated) == 2, "L1 allocated 2 GPUs: %s" % " ".join(d["bdf"] for d in allocated))
check(len(after) == 1 and after[0]["bdf"] in [d["bdf"] for d in allocated],
      "after device fail 1 of them stays allocated: %s" % " ".join(d["bdf"] for d in after))
check(all(d["island"] < 0 for d in allocated), "the stand-ins have no NVLink island")
print("switches of the allocated GPUs: %s" % ", ".join("%s behind %s" % (d["bdf"], d["switch"] or "none")
                                                       for d in allocated))
for name, gpus in (("allocated", allocated), ("after-failure", after)):
    summary = dump(name)
    print("%s:\n%s" % (name, summary.rstrip()))
    want, groups = expected_summary(gpus)
    if summary != want:
        print("expected:\n%s" % want.rstrip())
    check(summary == want, "%s: %d GPUs in %d locality groups, as their switches are" % (name, len(gpus), groups))
    check(not re.search(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", summary),
          "%s: no PCI addresses" % name)
    check("emu-gpu-server" not in summary, "%s: no host name" % name)
PY
say "step total took $((SECONDS - t0)) s"
say PASS
