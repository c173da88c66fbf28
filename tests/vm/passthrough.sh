#!/usr/bin/env bash
# Real discovery and vfio-pci binding on an emulated GPU server: boots
# vm-images/run-iommu-host.sh (q35, Intel IOMMU, two NUMA nodes, a PCIe switch
# on each with edu GPUs and e1000e NICs, two GPUs in one IOMMU group) with
# harmonaized and hzctl in its initramfs, and runs the guest test
# tests/vm/guest/tests/passthrough. It checks the kernel's driver links,
# driver_override and /dev/vfio nodes itself; here the inventory JSON it
# printed is checked against the sysfs facts it printed and the layout.
# Usage: passthrough.sh HARMONAIZED HZCTL VM_DIR OUT_DIR
#   VM_DIR is only read (the toolchain root); the image and logs go to OUT_DIR.
set -euo pipefail
harmonaized=$1 hzctl=$2 HZ_VM_DIR=$3 out=$4
export HZ_TEST=vm_passthrough
source "$(dirname "$0")/lib.sh"
t0=$SECONDS
mkdir -p "$out"
l1_initramfs "$harmonaized" "$hzctl" "$out" passthrough
say "step image took $((SECONDS - t0)) s"
t1=$SECONDS
log=$out/passthrough-guest.log
rc=0
"$HZ_TOP/vm-images/run-iommu-host.sh" --dir "$HZ_VM_DIR" --name passthrough \
	--initrd "$out/initramfs.gz" --test passthrough --timeout 170 --log "$log" || rc=$?
say "step guest took $((SECONDS - t1)) s (guest steps: $(grep -c '^passthrough: step' "$log" || true))"
grep '^passthrough: step' "$log" | tr -d '\r' | sed "s/^/[$HZ_TEST] guest /" || true
[ "$rc" -eq 0 ] || fail "the guest test failed (exit $rc; log: $log)"
expect_line "$log" '^HZ-RESULT: PASS passthrough' "guest result"

python3 - "$log" <<'PY' || fail "the inventory does not match the emulated server"
import json, sys

text = open(sys.argv[1], errors="replace").read().replace("\r", "")

def dump(name):
    begin = "HZ-DUMP-BEGIN %s\n" % name
    body = text.split(begin, 1)[1].split("HZ-DUMP-END %s" % name, 1)[0]
    return body

def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)

# The kernel's view: bdf vendor device class numa_node group driver realpath.
sysfs = {}
for line in dump("sysfs").splitlines():
    f = line.split()
    if len(f) < 7:
        continue
    bdf, vendor, device, cls, numa, group = f[:6]
    sysfs[bdf] = {"id": "%s:%s" % (vendor[2:], device[2:]), "class": cls, "numa": int(numa),
                  "group": int(group), "path": f[-1].split("/")}
inv = json.loads(dump("inventory"))["result"]
by_bdf = {d["bdf"]: d for d in inv}

stand_ins = sorted(b for b, s in sysfs.items() if s["id"] in ("1234:11e8", "8086:10d3"))
check(sorted(by_bdf) == stand_ins,
      "the inventory is exactly the 8 stand-ins: %s" % " ".join(stand_ins))
check(len(stand_ins) == 8, "8 stand-ins on the emulated server")
check("0000:00:01.0" in sysfs and sysfs["0000:00:01.0"]["class"].startswith("0x0300")
      and "0000:00:01.0" not in by_bdf, "QEMU's VGA (1234:1111) is not taken for a GPU")
for b, d in sorted(by_bdf.items()):
    s = sysfs[b]
    kind = "gpu" if s["id"] == "1234:11e8" else "nic"
    check(d["kind"] == kind and d["id"] == s["id"], "%s is a %s (%s)" % (b, kind, s["id"]))
    check(d["numa_node"] == s["numa"], "%s: NUMA node %d as sysfs says" % (b, s["numa"]))
    # The layout: bus 0x2X behind node 0's expander, 0x4X behind node 1's.
    node = 0 if b.startswith("0000:2") else 1
    check(s["numa"] == node, "%s: sysfs puts it on node %d" % (b, node))
    check(d["iommu_group"] == s["group"], "%s: IOMMU group %d as sysfs says" % (b, s["group"]))
    path = [p for p in s["path"] if p.startswith("0000:")][:-1]
    check(d["pcie_path"] == path, "%s: PCIe path %s" % (b, " ".join(path)))
    # The switch is the x3130 upstream port (bus 0x21 or 0x41), also for the
    # GPUs behind the PCIe-to-PCI bridge one level further down.
    check(d["switch"] == "0000:%d1:00.0" % (2 + 2 * node), "%s: switch %s" % (b, d["switch"]))
    check(d["state"] == "free", "%s: free at start" % b)

# GPU pools follow the switches: one per node.
pools = {}
for d in inv:
    if d["kind"] == "gpu":
        pools.setdefault(d["pool"], set()).add(d["switch"])
check(len(pools) == 2 and all(len(s) == 1 for s in pools.values()), "one GPU pool per switch")

# The pair behind the PCIe-to-PCI bridge: one group, and allocated together.
groups = {}
for b, d in by_bdf.items():
    groups.setdefault(d["iommu_group"], []).append(b)
pairs = [sorted(v) for v in groups.values() if len(v) > 1]
check(len(pairs) == 1 and all(sysfs[b]["id"] == "1234:11e8" for b in pairs[0]),
      "two GPUs share one IOMMU group: %s" % pairs)
allocated = {d["bdf"]: d for d in json.loads(dump("inventory-allocated"))["result"]}
check(all(d["state"] == "allocated" for d in allocated.values() if d["kind"] == "gpu"),
      "every GPU allocated after the third alloc")
owners = {allocated[b]["allocation"] for b in pairs[0]}
check(len(owners) == 1, "the group's two GPUs are in one allocation (%s)" % owners)
allocs = json.loads(dump("allocations"))["result"]
check(sum(len(a["devices"]) for a in allocs) == 7, "7 devices in the allocations (6 GPUs, 1 NIC)")
PY
# The fixture trees of the scheduler's unit tests against this real sysfs.
python3 - "$log" >"$out/sysfs-files.txt" <<'PY' || fail "no sysfs-files dump in the guest log"
import sys
text = open(sys.argv[1], errors="replace").read().replace("\r", "")
print(text.split("HZ-DUMP-BEGIN sysfs-files\n", 1)[1].split("HZ-DUMP-END sysfs-files", 1)[0], end="")
PY
fixtures=$HZ_TOP/tests/unit/scheduler/fixtures
python3 "$fixtures/check_against_sysfs.py" "$out/sysfs-files.txt" "$fixtures"/*/sysfs |
	sed "s/^/[$HZ_TEST] /" || fail "the fixture trees differ from the real sysfs"
say "step total took $((SECONDS - t0)) s"
say PASS
