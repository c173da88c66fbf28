#!/usr/bin/env bash
# Boots an emulated GPU server under QEMU (TCG) from the Debian 13 root: a q35
# machine with an emulated Intel IOMMU, two NUMA nodes, and on each node a
# PCIe switch with GPU and NIC stand-ins behind it. QEMU's `edu` device
# (1234:11e8) stands in for a GPU, `e1000e` (8086:10d3) for a NIC. The guest
# kernel sees real IOMMU groups and can bind the devices to vfio-pci.
#
# Each switch hangs off a root port of an expander host bridge (pxb-pcie) of
# its node, as on a two-socket server; the main host bridge keeps the
# chipset and QEMU's VGA.
#
#   NUMA 0: pxb-pcie (bus 0x20) - root port - x3130 switch
#             down 0: edu                      (GPU)
#             down 1: edu                      (GPU)
#             down 2: e1000e                   (NIC)
#             down 3: pcie-pci-bridge - edu, edu  (two GPUs, one IOMMU group)
#   NUMA 1: pxb-pcie (bus 0x40) - root port - x3130 switch
#             down 0: edu                      (GPU)
#             down 1: edu                      (GPU)
#             down 2: e1000e                   (NIC)
#
# The serial console goes to stdout and to the log. Nothing is written into
# the toolchain root: the kernel and initramfs are bind-mounted into it at
# /mnt, in a private mount namespace.
#
# For guests inside the server (tests/vm/passthrough_nested.sh) it can share
# the toolchain root itself, read-only, over virtio-9p (mount tag hzroot), so
# that the server runs the root's libvirtd and QEMU, and a directory of the
# host, writable (mount tag hzshare), for the nested guest's files and logs.
#
# Usage: vm-images/run-iommu-host.sh --name NAME --initrd FILE [--test TEST]
#          [--log FILE] [--timeout 240] [--dir DIR] [--kernel FILE]
#          [--node-mib 256] [--share-root] [--share DIR]
#          [--append ARGS] [--qemu-arg ARG]...
#   --initrd    the guest image (vm-images/build-initramfs.sh --out FILE)
#   --test      passed to the guest as hz.test=TEST (a script in its /tests)
#   --log       default: a file in a temporary directory, printed at the end
#   --dir       as for build-toolchain.sh; the root must be built already (only read)
#   --kernel    defaults to that of $HZ_GUEST_KERNEL (vm-images/lib/common.sh)
#   --node-mib  RAM of each of the two NUMA nodes
#   --share-root  the toolchain root over virtio-9p, read-only (tag hzroot)
#   --share     DIR over virtio-9p, writable (tag hzshare)
# Exit status: as for run-guest.sh (0 PASS, 1 FAIL, 2 no report, 124 timeout).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

name='' test_name='' log='' timeout_s=240 dir_arg='' kernel='' initrd='' append='' extra=()
node_mib=256 share_root='' share=''
while [ $# -gt 0 ]; do
	case $1 in
	--name) name=$2; shift 2 ;;
	--test) test_name=$2; shift 2 ;;
	--log) log=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--dir) dir_arg=$2; shift 2 ;;
	--kernel) kernel=$2; shift 2 ;;
	--initrd) initrd=$2; shift 2 ;;
	--append) append=$2; shift 2 ;;
	--node-mib) node_mib=$2; shift 2 ;;
	--share-root) share_root=1; shift ;;
	--share) share=$2; shift 2 ;;
	--qemu-arg) extra+=("$2"); shift 2 ;;
	-h | --help) sed -n '2,41p' "$0"; exit 0 ;;
	*) hz_die "unknown argument: $1" ;;
	esac
done

hz_require_root
hz_check_guest_name "$name" "$test_name"
[[ $timeout_s =~ ^[0-9]+$ ]] || hz_die "--timeout must be a number"
[[ $node_mib =~ ^[0-9]+$ ]] || hz_die "--node-mib must be a number"
[ -z "$share" ] || [ -d "$share" ] || hz_die "--share $share is not a directory"
dir=$(hz_vm_dir "$dir_arg")
root=$dir/root
[ -f "$dir/toolchain.stamp" ] || hz_die "no toolchain in $dir (run vm-images/build-toolchain.sh)"
[ -n "$kernel" ] || kernel=$(hz_guest_kernel_image "$dir" "$name")
[ -f "$kernel" ] || hz_die "no kernel $kernel"
[ -f "${initrd:-/nonexistent}" ] || hz_die "no initramfs '$initrd' (--initrd)"
[ -d "$root/mnt" ] || hz_die "$root/mnt is missing"

boot=$(mktemp -d "/tmp/hz-iommu-$name.XXXXXX")
trap 'rm -rf "$boot"' EXIT
cp "$kernel" "$boot/vmlinuz"
cp "$initrd" "$boot/initrd.gz"
log=${log:-$boot/console.log}
mkdir -p "$(dirname "$log")" "$boot/share"

guest_timeout=$((timeout_s > 60 ? timeout_s - 30 : timeout_s * 2 / 3))
# shellcheck disable=SC2054 # commas belong to QEMU's option syntax
qemu=(qemu-system-x86_64 -accel tcg -m $((2 * node_mib))M -smp 2 -name "$name"
	-machine q35 -device intel-iommu,caching-mode=on
	-object memory-backend-ram,id=m0,size="$node_mib"M -object memory-backend-ram,id=m1,size="$node_mib"M
	-numa node,nodeid=0,memdev=m0 -numa node,nodeid=1,memdev=m1
	-nic none
	# NUMA 0: an expander host bridge with its switch.
	-device pxb-pcie,id=pxb0,bus_nr=32,numa_node=0,bus=pcie.0
	-device pcie-root-port,id=rp0,bus=pxb0,chassis=1,slot=0
	-device x3130-upstream,id=up0,bus=rp0
	-device xio3130-downstream,id=dn00,bus=up0,chassis=10,slot=0
	-device xio3130-downstream,id=dn01,bus=up0,chassis=11,slot=0
	-device xio3130-downstream,id=dn02,bus=up0,chassis=12,slot=0
	-device xio3130-downstream,id=dn03,bus=up0,chassis=13,slot=0
	-device edu,bus=dn00 -device edu,bus=dn01
	-netdev user,id=n0 -device e1000e,bus=dn02,netdev=n0
	-device pcie-pci-bridge,id=pb0,bus=dn03
	-device edu,bus=pb0,addr=1 -device edu,bus=pb0,addr=2
	# NUMA 1: the same on the other node.
	-device pxb-pcie,id=pxb1,bus_nr=64,numa_node=1,bus=pcie.0
	-device pcie-root-port,id=rp1,bus=pxb1,chassis=2,slot=0
	-device x3130-upstream,id=up1,bus=rp1
	-device xio3130-downstream,id=dn10,bus=up1,chassis=20,slot=0
	-device xio3130-downstream,id=dn11,bus=up1,chassis=21,slot=0
	-device xio3130-downstream,id=dn12,bus=up1,chassis=22,slot=0
	-device edu,bus=dn10 -device edu,bus=dn11
	-netdev user,id=n1 -device e1000e,bus=dn12,netdev=n1
	-kernel /mnt/vmlinuz -initrd /mnt/initrd.gz
	-append "console=ttyS0 panic=-1 loglevel=4 intel_iommu=on ${test_name:+hz.test=$test_name hz.timeout=$guest_timeout} $append"
	-display none -serial stdio -monitor none -no-reboot)
# The shares: QEMU runs chrooted into the root, so the root is its "/" and
# the shared directory is bind-mounted at /mnt/share.
# shellcheck disable=SC2054 # commas belong to QEMU's option syntax
if [ -n "$share_root" ]; then
	qemu+=(-fsdev local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap
		-device virtio-9p-pci,fsdev=fsroot,mount_tag=hzroot,bus=pcie.0)
fi
# shellcheck disable=SC2054
if [ -n "$share" ]; then
	qemu+=(-fsdev local,id=fsshare,path=/mnt/share,security_model=none,multidevs=remap
		-device virtio-9p-pci,fsdev=fsshare,mount_tag=hzshare,bus=pcie.0)
fi
qemu+=("${extra[@]}")

start=$SECONDS
set +e
timeout --kill-after=10 "$timeout_s" unshare --mount --propagation private bash -euo pipefail -c '
	root=$1 boot=$2 share=$3; shift 3
	mount -t proc proc "$root/proc"
	mount --bind /dev "$root/dev"
	mount --bind "$boot" "$root/mnt"
	[ -z "$share" ] || mount --bind "$share" "$root/mnt/share"
	exec chroot "$root" "$@"
' hz-iommu-host "$root" "$boot" "$share" "${qemu[@]}" </dev/null 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
hz_log "$name: QEMU exited with $rc after $((SECONDS - start)) s (log: $log)"
[ "$log" != "$boot/console.log" ] || { cp "$log" "/tmp/hz-iommu-$name.log"; hz_log "log kept in /tmp/hz-iommu-$name.log"; }

hz_guest_exit "$name" "$rc" "$timeout_s" "$log" "$test_name"
