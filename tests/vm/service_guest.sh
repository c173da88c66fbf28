#!/usr/bin/env bash
# Boots a guest against harmonaized: starts the service with a private state
# directory, creates a tenant, binds a VM socket to it with hzctl, and runs the
# named guest test, which uses the real driver (guest/driver) and hz_drvtest.
# Passes when the guest reports PASS and the service saw the VM connect.
# With RUNNER "libvirt" the guest is a libvirt domain (from
# vm-images/libvirt/harmonaize-domain.xml.in) instead of a plain QEMU.
# driver_families runs the service on a fixture host (an 8-GPU sysfs tree
# and its inventory), so that topology and negotiation have GPUs to offer.
# Usage: service_guest.sh GUEST_TEST HARMONAIZED HZCTL VM_DIR [qemu|libvirt]
set -euo pipefail
guest_test=$1 harmonaized=$2 hzctl=$3 runner=${5:-qemu}
export HZ_TEST=vm_$guest_test
[ "$runner" = libvirt ] && HZ_TEST=vm_libvirt_$guest_test
HZ_VM_DIR=$4
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
config=()
if [ "$guest_test" = driver_families ]; then
	fixture=$HZ_TOP/tests/unit/scheduler/fixtures/hgx8
	cp -a "$fixture/sysfs" "$HZ_WORK/sysfs"  # the scheduler writes vfio bindings into it
	cat >"$HZ_WORK/harmonaized.toml" <<EOF
[scheduler]
sysfs_root = "$HZ_WORK/sysfs"
provider_file = "$fixture/inventory.toml"
sync = false
[negotiation]
window_s = 10
offer_ttl_s = 10
decide_interval_ms = 20
EOF
	config=(--config "$HZ_WORK/harmonaized.toml")
fi
hz_spawn "$HZ_WORK/$guest_test-harmonaized.log" "$harmonaized" "${config[@]}" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level debug
hz_wait_socket "$ctl" "$HZ_LAST_PID"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket vm0.sock >/dev/null || fail "hzctl vm bind"
hz_wait_socket "$HZ_WORK/vms/vm0.sock" "$HZ_LAST_PID"

# harmonaized's default device: 4 request queues after control and event.
rc=0
log=$HZ_WORK/$guest_test-$runner-guest.log
if [ "$runner" = libvirt ]; then
	"$HZ_TOP/vm-images/run-libvirt-guest.sh" --dir "$HZ_VM_DIR" --name "lv-$guest_test" \
		--socket "$HZ_WORK/vms/vm0.sock" --test "$guest_test" --num-vqs 6 --vq-size 128 \
		--config-size 64 --timeout 170 --log "$log" || rc=$?
else
	"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "$guest_test" --socket "$HZ_WORK/vms/vm0.sock" \
		--test "$guest_test" --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 \
		--log "$log" || rc=$?
fi
"$hzctl" -s "$ctl" --json counters >"$HZ_WORK/$guest_test-counters.log" 2>&1 || true
[ "$rc" -eq 0 ] || fail "the guest test failed ($runner runner exit $rc)"
if [ "$runner" = libvirt ]; then
	# libvirt defined and started the domain from the template, with shared
	# memfd RAM and the device passed through <qemu:commandline>.
	expect_line "$log" '^HZ-LIBVIRT: defined lv-' "libvirt defined the domain"
	expect_line "$log" '^HZ-LIBVIRT: started lv-' "libvirt started the domain"
	expect_line "$log" 'memory-backend-memfd.*"share":true' "guest RAM is a shared memfd"
	expect_line "$log" 'qemu -device vhost-user-test-device-pci,chardev=hz0,virtio-id=21' "device on QEMU's command line"
	expect_line "$log" '^HZ-LIBVIRT: lv-.* is shut off' "the domain powered off"
	expect_line "$log" 'harmonaize virtio[0-9]+: harmonaize0: ' "the real driver bound"
	expect_line "$log" "HZ-RESULT: PASS $guest_test" "guest result"
else
	expect_line "$log" "^HZ-RESULT: PASS $guest_test" "guest result"
fi
# The service's view: the VM connected to the bound socket and its rings ran.
expect_line "$HZ_WORK/$guest_test-harmonaized.log" 'vm0\.sock\]: front-end connected' "harmonaized: VM connected"
expect_line "$HZ_WORK/$guest_test-harmonaized.log" 'vm0\.sock\]: queue 0 running' "harmonaized: control queue running"
# Every guest test starts with HELLO: the service counted it as completed OK.
ok_count() {
	python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
print(sum(r["count"] for r in doc["result"]["requests"] if r["opcode"] == sys.argv[2] and r["status"] == "OK"))
' "$HZ_WORK/$guest_test-counters.log" "$1" || fail "no request counters from hzctl"
}
expect_ok() {
	local n
	n=$(ok_count "$1")
	[ "$n" -ge "$2" ] || fail "harmonaized counted $n successful $1, expected at least $2"
	say "ok: harmonaized counted $n successful $1"
}
expect_ok HELLO 1
if [ "$guest_test" = driver_allreduce ]; then
	# Both ranks' regions and collectives went through the service.
	expect_ok REGION_REGISTER 2
	expect_ok COMM_INIT 2
	expect_ok ALLREDUCE 2
fi
if [ "$guest_test" = driver_families ]; then
	log=$HZ_WORK/$guest_test-$runner-guest.log
	expect_line "$log" 'checkpoint restored bit-exact' "checkpoint round trip"
	expect_line "$log" 'NEG_REQUEST status OK .* offers [1-9]' "negotiation offers"
fi
say "PASS"
