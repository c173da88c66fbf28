#!/usr/bin/env bash
# `hzctl vm attach` against a real libvirtd (libvirt 11.3 of the Debian 13
# toolchain root) and QEMU 11.1, with the real driver in the guest:
#   1. a domain defined without the device gets it through the libvirt API
#      (shared memfd memory, the chardev and the device) and its socket bound;
#   2. libvirt's QEMU hook (hypervisor/hzctl/libvirt/qemu-hook.in, as
#      installed in /etc/libvirt/hooks/qemu.d) binds the socket when the
#      domain starts, the guest's driver says HELLO, and the hook unbinds the
#      socket when the domain is released;
#   3. `hzctl vm detach` gives back the definition libvirt had before;
#   4. a domain whose bind fails (its tenant is gone) does not start, and
#      libvirt reports harmonaized's reason.
# libvirtd runs chrooted into the root in a private mount namespace; its
# /run is a directory of this test, so harmonaized and virsh reach its
# socket from outside, and the test's directory appears at the same path
# inside the root, so the socket paths in the definition mean the same on
# both sides.
# Usage: libvirt_attach.sh HARMONAIZED HZCTL VM_DIR
set -euo pipefail
harmonaized=$1 hzctl=$2
export HZ_TEST=vm_libvirt_attach
HZ_VM_DIR=$3
source "$(dirname "$0")/lib.sh"
source "$HZ_TOP/vm-images/lib/common.sh"
name=lv-attach
root=$HZ_VM_DIR/root
[ -x "$root/usr/sbin/libvirtd" ] || fail "no libvirtd in $root (vm-images/build-toolchain.sh)"
guest_kernel=$(hz_guest_kernel)
kver=$(hz_guest_kernel_version "$guest_kernel" "$HZ_VM_DIR")
kernel=$(hz_guest_kernel_root "$guest_kernel" "$HZ_VM_DIR")/boot/vmlinuz-$kver
initrd=$(hz_guest_initramfs "$HZ_VM_DIR" "$guest_kernel")
[ -f "$initrd" ] || fail "no initramfs $initrd (vm-images/build-guest.sh)"

hz_workdir
w=$HZ_WORK
virsh_uri="qemu:///system?socket=$w/run/libvirt/libvirt-sock"
lv() { timeout 60 virsh -q -c "$virsh_uri" "$@"; }
hz() { "$hzctl" -s "$w/control.sock" --timeout 20 "$@"; }
# A domain left running would keep the namespace and QEMU alive.
trap 'lv destroy "$name" >/dev/null 2>&1 || true; hz_cleanup; rmdir "$root$w" 2>/dev/null || true' EXIT

mkdir -p "$w/run" "$w/vms" "$w/state" "$w/boot" "$w/libvirt-log/qemu" \
	"$w/etc-libvirt/qemu" "$w/etc-libvirt/hooks/qemu.d" "$w/etc-default"
cp "$kernel" "$w/boot/vmlinuz"
cp "$initrd" "$w/boot/initrd.gz"
cp "$hzctl" "$w/hzctl"
# The hook as installed, with the hzctl and control socket of this test.
sed "s|@HZCTL@|$w/hzctl|" "$HZ_TOP/hypervisor/hzctl/libvirt/qemu-hook.in" \
	>"$w/etc-libvirt/hooks/qemu.d/harmonaize"
chmod 755 "$w/etc-libvirt/hooks/qemu.d/harmonaize"
echo "HZ_CONTROL_SOCKET=$w/control.sock" >"$w/etc-default/harmonaize-libvirt-hook"
hz_libvirt_qemu_conf "$w/etc-libvirt/qemu.conf"
echo "log_outputs = \"3:file:$w/libvirtd.log\"" >"$w/etc-libvirt/libvirtd.conf"

hz_spawn "$w/libvirtd.out" unshare --mount --propagation private bash -euo pipefail -c '
	root=$1 w=$2
	mount -t proc proc "$root/proc"
	mount --rbind /dev "$root/dev"
	mount --rbind /sys "$root/sys"
	mount --bind "$w/run" "$root/run"
	mkdir -p "$root/run/lock"
	for d in var/lib/libvirt var/cache/libvirt; do
		mkdir -p "$root/$d"
		mount -t tmpfs tmpfs "$root/$d"
	done
	mkdir -p "$root/var/lib/libvirt/qemu" "$root/var/log/libvirt"
	mount --bind "$w/libvirt-log" "$root/var/log/libvirt"
	mount --bind "$w/etc-libvirt" "$root/etc/libvirt"
	mount --bind "$w/etc-default" "$root/etc/default"
	mkdir -p "$root$w"
	mount --bind "$w" "$root$w"
	exec chroot "$root" /usr/sbin/libvirtd
' hz-libvirtd "$root" "$w"
hz_wait_socket "$w/run/libvirt/libvirt-sock" "$HZ_LAST_PID"
say "libvirtd: $(lv version --daemon | grep -i 'daemon' | head -n1)"

cat >"$w/harmonaized.toml" <<EOF
[scheduler]
libvirt_uri = "$virsh_uri"
EOF
hz_spawn "$w/harmonaized.log" "$harmonaized" --config "$w/harmonaized.toml" --state-dir "$w/state" \
	--control-socket "$w/control.sock" --vm-socket-dir "$w/vms" --no-metrics --log-level debug
hz_wait_socket "$w/control.sock" "$HZ_LAST_PID"
hz tenant create acme >/dev/null || fail "hzctl tenant create"

# 1. A plain domain: no shared memory, no QEMU namespace, no device.
cat >"$w/boot/domain.xml" <<EOF
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>$w/boot/vmlinuz</kernel>
    <initrd>$w/boot/initrd.gz</initrd>
    <cmdline>console=ttyS0 panic=-1 loglevel=4 hz.test=hello hz.timeout=100</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='file'><source path='$w/boot/console.log'/><target port='0'/></serial>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
lv define "$w/boot/domain.xml" >/dev/null || fail "virsh define"
lv dumpxml --inactive "$name" >"$w/before.xml"
grep -q harmonaize "$w/before.xml" && fail "the plain domain has the device already"

hz vm attach --tenant acme --domain "$name" >"$w/attach.out" || fail "hzctl vm attach: $(cat "$w/attach.out")"
say "hzctl vm attach: $(head -n1 "$w/attach.out")"
socket=$w/vms/$name.sock
[ -S "$socket" ] || fail "vm attach did not bind $socket"
lv dumpxml --inactive "$name" >"$w/attached.xml"
expect_line "$w/attached.xml" "<source type='memfd'/>" "definition: memfd memory"
expect_line "$w/attached.xml" "<access mode='shared'/>" "definition: shared with the back-end"
expect_line "$w/attached.xml" "socket,id=harmonaize0,path=$socket" "definition: the chardev"
expect_line "$w/attached.xml" '\{&quot;driver&quot;:&quot;vhost-user-test-device-pci&quot;,&quot;chardev&quot;:&quot;harmonaize0&quot;,&quot;virtio-id&quot;:21' "definition: the device, as JSON"
expect_line "$w/attached.xml" "tenant=['\"]acme['\"]" "definition: the record"

# 2. The start must bind through the hook: unbind what attach bound.
hz vm unbind --socket "$name.sock" >/dev/null || fail "hzctl vm unbind"
[ -S "$socket" ] && fail "the socket is still there after vm unbind"
lv start "$name" >/dev/null || fail "virsh start: $(tail -n 5 "$w/libvirtd.log")"
say "virsh start: the domain runs"
hz --json vm list | grep -q "\"domain\": \"$name\"" || fail "the hook did not bind the socket at the start"
state=
for _ in $(seq 260); do
	state=$(lv domstate "$name" 2>/dev/null || true)
	[ "$state" = "shut off" ] && break
	sleep 0.5
done
[ "$state" = "shut off" ] || fail "the domain did not power off (state: $state)"
sed 's/^/HZ-CONSOLE: /' "$w/boot/console.log" >"$w/console.log"
expect_line "$w/libvirt-log/qemu/$name.log" '"driver":"vhost-user-test-device-pci","chardev":"harmonaize0"' "QEMU ran the device"
expect_line "$w/console.log" 'harmonaize virtio[0-9]+: harmonaize0: ' "the real driver bound"
expect_line "$w/console.log" 'HZ-RESULT: PASS hello' "the guest's HELLO"
expect_line "$w/harmonaized.log" "$name\.sock\]: front-end connected" "harmonaized: the VM connected"
# release runs as libvirt finishes the domain's stop.
for _ in $(seq 100); do
	[ -S "$socket" ] || break
	sleep 0.1
done
[ -S "$socket" ] && fail "the release hook did not unbind $socket"
hz --json vm list | grep -q "\"domain\": \"$name\"" && fail "harmonaized still lists the VM"
say "ok: the release hook unbound the socket"

# 3. Detach: the definition libvirt had before attach, exactly.
hz vm detach --domain "$name" >"$w/detach.out" || fail "hzctl vm detach: $(cat "$w/detach.out")"
lv dumpxml --inactive "$name" >"$w/detached.xml"
diff -u "$w/before.xml" "$w/detached.xml" || fail "vm detach left the definition changed"
say "ok: vm detach restored the definition"

# 4. A bind that fails keeps the domain from starting, with the reason.
hz vm attach --tenant acme --domain "$name" >/dev/null || fail "hzctl vm attach (again)"
hz vm unbind --socket "$name.sock" >/dev/null || fail "hzctl vm unbind (again)"
hz tenant remove acme >/dev/null || fail "hzctl tenant remove"
if lv start "$name" >"$w/refused.out" 2>&1; then
	fail "the domain started although its tenant is gone"
fi
expect_line "$w/refused.out" 'no tenant acme' "libvirt refused the start with harmonaized's reason"
[ "$(lv domstate "$name")" = "shut off" ] || fail "the refused domain is not shut off"
lv undefine "$name" >/dev/null || true
say "PASS"
