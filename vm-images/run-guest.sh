#!/usr/bin/env bash
# Boots one test guest under QEMU (TCG) from the Debian 13 root, with the
# HarmonAIze device attached to a vhost-user socket whose back-end is already
# listening. The serial console goes to stdout and to a log file.
#
# Usage: vm-images/run-guest.sh --name NAME [--socket PATH] [--test TEST]
#          [--mem 512M] [--timeout 120] [--smp 1] [--num-vqs 3] [--vq-size 128]
#          [--config-size 64] [--log FILE] [--dir DIR] [--kernel FILE]
#          [--initrd FILE] [--append ARGS] [--qemu-arg ARG]...
#   --socket  the back-end's vhost-user socket; without it no device is added
#   --test    passed to the guest as hz.test=TEST (a script in its /tests)
#   --dir     as for build-toolchain.sh; the root must be built already
#   --qemu-arg one more QEMU argument (repeat for each), e.g. a -netdev
#   --kernel, --initrd  default to those of the guest kernel $HZ_GUEST_KERNEL
#             (bookworm, trixie or trixie-backports; vm-images/lib/common.sh)
# Exit status: 0 when the guest reports "HZ-RESULT: PASS TEST", 1 on a FAIL
# report, 2 when the guest ended without a report, 124 on timeout. Without
# --test, QEMU's own exit status.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

name='' socket='' test_name='' mem=512M timeout_s=120 smp=1 num_vqs=3 vq_size=128
config_size=64 log='' dir_arg='' kernel='' initrd='' append='' extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--name) name=$2; shift 2 ;;
	--socket) socket=$2; shift 2 ;;
	--test) test_name=$2; shift 2 ;;
	--mem) mem=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--smp) smp=$2; shift 2 ;;
	--num-vqs) num_vqs=$2; shift 2 ;;
	--vq-size) vq_size=$2; shift 2 ;;
	--config-size) config_size=$2; shift 2 ;;
	--log) log=$2; shift 2 ;;
	--dir) dir_arg=$2; shift 2 ;;
	--kernel) kernel=$2; shift 2 ;;
	--initrd) initrd=$2; shift 2 ;;
	--append) append=$2; shift 2 ;;
	--qemu-arg) extra+=("$2"); shift 2 ;;
	-h | --help) sed -n '2,18p' "$0"; exit 0 ;;
	*) hz_die "unknown argument: $1" ;;
	esac
done

hz_require_root
hz_check_guest_name "$name" "$test_name"
[[ $mem =~ ^[0-9]+[MG]$ ]] || hz_die "--mem must look like 512M or 1G"
for v in timeout_s smp num_vqs vq_size config_size; do
	[[ ${!v} =~ ^[0-9]+$ ]] || hz_die "--${v//_/-} must be a number"
done
dir=$(hz_vm_dir "$dir_arg")
root=$dir/root
[ -f "$dir/toolchain.stamp" ] || hz_die "no toolchain in $dir (run vm-images/build-toolchain.sh)"
guest_kernel=$(hz_guest_kernel)
[ -n "$kernel" ] || kernel=$(hz_guest_kernel_image "$dir" "$name")
initrd=${initrd:-$(hz_guest_initramfs "$dir" "$guest_kernel")}
[ -f "$kernel" ] || hz_die "no kernel $kernel"
[ -f "$initrd" ] || hz_die "no initramfs $initrd (run vm-images/build-initramfs.sh)"
log=${log:-$dir/logs/$name.log}
mkdir -p "$(dirname "$log")"

# QEMU runs inside the root: the kernel and initramfs are copied there, and the
# socket's directory is bind-mounted at /run/hz (in a private mount namespace,
# so concurrent guests each see their own).
boot=$root/hz-boot/$name
mkdir -p "$boot"
cp "$kernel" "$boot/vmlinuz"
cp "$initrd" "$boot/initrd.gz"

# The guest's own limit leaves time to report before the host's runs out.
guest_timeout=$((timeout_s > 60 ? timeout_s - 30 : timeout_s * 2 / 3))
# shellcheck disable=SC2054 # commas belong to QEMU's option syntax
qemu=(qemu-system-x86_64 -accel tcg -m "$mem" -smp "$smp"
	-object "memory-backend-memfd,id=mem,size=$mem,share=on" -machine pc,memory-backend=mem
	-kernel "/hz-boot/$name/vmlinuz" -initrd "/hz-boot/$name/initrd.gz"
	-append "console=ttyS0 panic=-1 loglevel=4 ${test_name:+hz.test=$test_name hz.timeout=$guest_timeout} $append"
	-display none -serial stdio -monitor none -no-reboot -name "$name")
sockdir=
if [ -n "$socket" ]; then
	[ -S "$socket" ] || hz_die "$socket is not a listening socket (start the back-end first)"
	sockdir=$(cd "$(dirname "$socket")" && pwd)
	qemu+=(-chardev "socket,id=hz0,path=/run/hz/$(basename "$socket")"
		-device "vhost-user-test-device-pci,chardev=hz0,virtio-id=21,num_vqs=$num_vqs,vq_size=$vq_size,config_size=$config_size")
fi
qemu+=("${extra[@]}")

start=$SECONDS
set +e
timeout --kill-after=10 "$timeout_s" unshare --mount --propagation private bash -euo pipefail -c '
	root=$1 sockdir=$2; shift 2
	mount -t proc proc "$root/proc"
	mount --bind /dev "$root/dev"
	[ -z "$sockdir" ] || mount --bind "$sockdir" "$root/run/hz"
	exec chroot "$root" "$@"
' hz-guest "$root" "$sockdir" "${qemu[@]}" </dev/null 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
hz_log "$name: QEMU exited with $rc after $((SECONDS - start)) s (log: $log)"

hz_guest_exit "$name" "$rc" "$timeout_s" "$log" "$test_name"
