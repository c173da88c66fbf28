#!/usr/bin/env bash
# Boots a test guest through libvirt: starts libvirtd (QEMU driver) inside the
# Debian 13 root, defines a domain from libvirt/harmonaize-domain.xml.in,
# starts it, waits until the guest powers off and prints its console.
#
# Usage: vm-images/run-libvirt-guest.sh --name NAME --socket PATH [--test TEST]
#          [--mem-mib 512] [--timeout 150] [--num-vqs 3] [--vq-size 128]
#          [--config-size 64] [--log FILE] [--dir DIR]
# Exit status as for run-guest.sh: 0 on "HZ-RESULT: PASS TEST", 1 on FAIL,
# 2 without a result, 124 on timeout.
#
# libvirtd runs in a private mount namespace with fresh /run and libvirt
# state directories, so nothing of it outlives the run.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

name='' socket='' test_name='' mem_mib=512 timeout_s=150 num_vqs=3 vq_size=128 config_size=64
log='' dir_arg=''
while [ $# -gt 0 ]; do
	case $1 in
	--name) name=$2; shift 2 ;;
	--socket) socket=$2; shift 2 ;;
	--test) test_name=$2; shift 2 ;;
	--mem-mib) mem_mib=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--num-vqs) num_vqs=$2; shift 2 ;;
	--vq-size) vq_size=$2; shift 2 ;;
	--config-size) config_size=$2; shift 2 ;;
	--log) log=$2; shift 2 ;;
	--dir) dir_arg=$2; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0"; exit 0 ;;
	*) hz_die "unknown argument: $1" ;;
	esac
done

hz_require_root
hz_check_guest_name "$name" "$test_name"
for v in mem_mib timeout_s num_vqs vq_size config_size; do
	[[ ${!v} =~ ^[0-9]+$ ]] || hz_die "--${v//_/-} must be a number"
done
[ -S "$socket" ] || hz_die "$socket is not a listening socket (start the back-end first)"
dir=$(hz_vm_dir "$dir_arg")
root=$dir/root
[ -f "$dir/toolchain.stamp" ] || hz_die "no toolchain in $dir (run vm-images/build-toolchain.sh)"
[ -x "$root/usr/sbin/libvirtd" ] || hz_die "no libvirtd in $root (rebuild the toolchain)"
# The guest kernel and its image: $HZ_GUEST_KERNEL's (vm-images/lib/common.sh).
guest_kernel=$(hz_guest_kernel)
kver=$(hz_guest_kernel_version "$guest_kernel" "$dir")
kernel=$(hz_guest_kernel_root "$guest_kernel" "$dir")/boot/vmlinuz-$kver
initrd=$(hz_guest_initramfs "$dir" "$guest_kernel")
hz_log "$name: guest kernel $guest_kernel ($kver)"
[ -f "$initrd" ] || hz_die "no initramfs $initrd (run vm-images/build-guest.sh)"
log=${log:-$dir/logs/$name-libvirt.log}
mkdir -p "$(dirname "$log")"

boot=$root/hz-boot/$name
mkdir -p "$boot"
cp "$kernel" "$boot/vmlinuz"
cp "$initrd" "$boot/initrd.gz"
guest_timeout=$((timeout_s > 60 ? timeout_s - 45 : timeout_s / 2))
cmdline="console=ttyS0 panic=-1 loglevel=4${test_name:+ hz.test=$test_name hz.timeout=$guest_timeout}"
sed -e "s|@NAME@|$name|" -e "s|@MEM_MIB@|$mem_mib|" \
	-e "s|@KERNEL@|/hz-boot/$name/vmlinuz|" -e "s|@INITRD@|/hz-boot/$name/initrd.gz|" \
	-e "s|@CMDLINE@|$cmdline|" -e "s|@CONSOLE_LOG@|/hz-boot/$name/console.log|" \
	-e "s|@SOCKET@|/run/hz/$(basename "$socket")|" -e "s|@NUM_VQS@|$num_vqs|" \
	-e "s|@VQ_SIZE@|$vq_size|" -e "s|@CONFIG_SIZE@|$config_size|" \
	"$(dirname "$0")/libvirt/harmonaize-domain.xml.in" >"$boot/domain.xml"
rm -f "$boot/console.log"

# Runs inside the root: libvirtd, then the domain's whole life.
cat >"$boot/run.sh" <<'INNER'
#!/bin/bash
set -euo pipefail
name=$1 timeout_s=$2
boot=/hz-boot/$name
libvirtd --pid-file /run/hz-libvirtd.pid >"$boot/libvirtd.out" 2>&1 &
daemon=$!
# QEMU runs in its own session: a run cut short must destroy the domain.
trap 'command virsh -q -c qemu:///system destroy "$name" >/dev/null 2>&1 || true
	kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	[ -S /run/libvirt/libvirt-sock ] && break
	kill -0 $daemon 2>/dev/null || { cat "$boot/libvirtd.out"; exit 3; }
	sleep 0.1
done
virsh() { command virsh -q -c qemu:///system "$@"; }
virsh version --daemon | sed 's/^/HZ-LIBVIRT: /'
virsh define "$boot/domain.xml" >/dev/null
echo "HZ-LIBVIRT: defined $name"
virsh start "$name" >/dev/null
echo "HZ-LIBVIRT: started $name"
state=
for _ in $(seq $((timeout_s * 2))); do
	state=$(virsh domstate "$name" 2>/dev/null || true)
	[ "$state" = "shut off" ] && break
	sleep 0.5
done
echo "HZ-LIBVIRT: $name is $state"
grep -a -o -- '-device vhost-user-test-device-pci[^ ]*' "/var/log/libvirt/qemu/$name.log" |
	sed 's/^/HZ-LIBVIRT: qemu /' || true
grep -a -o -- 'memory-backend-memfd[^ ]*' "/var/log/libvirt/qemu/$name.log" |
	sed 's/^/HZ-LIBVIRT: qemu /' || true
[ "$state" = "shut off" ] || virsh destroy "$name" >/dev/null 2>&1 || true
cp "/var/log/libvirt/qemu/$name.log" "$boot/qemu.log" 2>/dev/null || true
virsh undefine "$name" >/dev/null
INNER
chmod 755 "$boot/run.sh"
# libvirt's configuration, mounted over the root's /etc/libvirt for this run only.
mkdir -p "$boot/etc-libvirt"
hz_libvirt_qemu_conf "$boot/etc-libvirt/qemu.conf"
cat >"$boot/etc-libvirt/libvirtd.conf" <<CONF
log_outputs = "3:file:/hz-boot/$name/libvirtd.log"
CONF

sockdir=$(cd "$(dirname "$socket")" && pwd)
start=$SECONDS
set +e
timeout --kill-after=10 "$timeout_s" unshare --mount --propagation private bash -euo pipefail -c '
	root=$1 sockdir=$2 name=$3; shift 3
	mount -t proc proc "$root/proc"
	mount --rbind /dev "$root/dev"
	mount --rbind /sys "$root/sys"
	# Fresh state for libvirt: nothing is left behind in the root.
	mount -t tmpfs tmpfs "$root/run"
	mkdir -p "$root/run/hz" "$root/run/lock"
	mount --bind "$sockdir" "$root/run/hz"
	for d in var/lib/libvirt var/log/libvirt var/cache/libvirt etc/libvirt; do
		mkdir -p "$root/$d"
		mount -t tmpfs tmpfs "$root/$d"
	done
	cp "$root/hz-boot/$name/etc-libvirt/"* "$root/etc/libvirt/"
	mkdir -p "$root/var/log/libvirt/qemu" "$root/var/lib/libvirt/qemu" "$root/etc/libvirt/qemu"
	exec chroot "$root" "$@"
' hz-libvirt "$root" "$sockdir" "$name" /hz-boot/"$name"/run.sh "$name" "$((timeout_s - 15))" </dev/null 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ -f "$boot/console.log" ]; then
	sed 's/^/HZ-CONSOLE: /' "$boot/console.log" | tee -a "$log"
fi
hz_log "$name: libvirt run ended with $rc after $((SECONDS - start)) s (log: $log)"
# A libvirt run that failed (not a guest's result) is "no result".
[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || [ "$rc" -eq 0 ] || exit 2
hz_guest_exit "$name" "$rc" "$timeout_s" "$log" "$test_name" "HZ-CONSOLE: "
