#!/usr/bin/env bash
# Boots a guest against harmonaized: starts the service with a private state
# directory, creates a tenant, binds a VM socket to it with hzctl, and runs the
# named guest test, which uses the real driver (guest/driver) and hz_drvtest.
# Passes when the guest reports PASS and the service saw the VM connect.
# Usage: service_guest.sh GUEST_TEST HARMONAIZED HZCTL VM_DIR
set -euo pipefail
guest_test=$1 harmonaized=$2 hzctl=$3
HZ_TEST=vm_$guest_test
HZ_VM_DIR=$4
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
hz_spawn "$HZ_WORK/$guest_test-harmonaized.log" "$harmonaized" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level debug
hz_wait_socket "$ctl" "$HZ_LAST_PID"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket vm0.sock >/dev/null || fail "hzctl vm bind"
hz_wait_socket "$HZ_WORK/vms/vm0.sock" "$HZ_LAST_PID"

# harmonaized's default device: 4 request queues after control and event.
rc=0
"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "$guest_test" --socket "$HZ_WORK/vms/vm0.sock" \
	--test "$guest_test" --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 \
	--log "$HZ_WORK/$guest_test-guest.log" || rc=$?
"$hzctl" -s "$ctl" --json counters >"$HZ_WORK/$guest_test-counters.log" 2>&1 || true
[ "$rc" -eq 0 ] || fail "the guest test failed (run-guest.sh exit $rc)"
expect_line "$HZ_WORK/$guest_test-guest.log" "^HZ-RESULT: PASS $guest_test" "guest result"
# The service's view: the VM connected to the bound socket.
expect_line "$HZ_WORK/$guest_test-harmonaized.log" 'vm0\.sock' "harmonaized served vm0.sock"
say "PASS"
