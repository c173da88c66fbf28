#!/usr/bin/env bash
# vm_driver_upgrade and vm_driver_crash: a QEMU guest with the real driver
# keeps its harmonaize device while harmonaized is replaced under it: by a
# live upgrade (hzctl upgrade, protocol/SPEC.md §2.9), or by SIGKILL and a
# restart with its fd store (--fd-store, §2.10) under tests/vm/service_manager.py,
# which restarts it as systemd restarts a crashed unit.
# The guest (tests/vm/guest/tests/driver_upgrade) says HELLO, registers a
# region, runs a one-rank ALLREDUCE and subscribes to events; then the host
# replaces the service. The guest must receive MAINTENANCE/SERVICE_RESTARTED
# (topic 1, kind 4) through the event queue it subscribed on before, and its
# next region and ALLREDUCE must succeed with no reload of the driver.
# Usage: service_restart.sh upgrade|crash HARMONAIZED HZCTL VM_DIR
set -euo pipefail
mode=$1 harmonaized=$2 hzctl=$3
export HZ_TEST=vm_driver_$mode
HZ_VM_DIR=$4
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
service_log=$HZ_WORK/$mode-harmonaized.log
args=(--state-dir "$HZ_WORK/state" --control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics
	--log-level info)
if [ "$mode" = crash ]; then
	hz_spawn "$service_log" /usr/bin/python3 "$(dirname "$0")/service_manager.py" "$HZ_WORK/notify.sock" \
		"$harmonaized" --fd-store "${args[@]}"
else
	hz_spawn "$service_log" "$harmonaized" "${args[@]}"
fi
manager=$HZ_LAST_PID
hz_wait_socket "$ctl" "$manager"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket vm0.sock >/dev/null || fail "hzctl vm bind"
hz_wait_socket "$HZ_WORK/vms/vm0.sock" "$manager"
service_pid() {
	"$hzctl" -s "$ctl" --json status | python3 -c 'import json, sys; print(json.load(sys.stdin)["result"]["pid"])'
}
first=$(service_pid) || fail "hzctl status"

log=$HZ_WORK/$mode-guest.log
"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "driver_$mode" --socket "$HZ_WORK/vms/vm0.sock" \
	--test driver_upgrade --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 \
	--log "$log" >/dev/null 2>&1 &
guest=$!
HZ_PIDS+=("$guest")

hz_wait_line "$log" '^HZ-EVENTS: subscribed' "$guest"
expect_line "$log" '^HZ-EVENTS: subscribed' "guest subscribed"

if [ "$mode" = crash ]; then
	kill -USR1 "$manager"
	hz_wait_line "$service_log" 'event=crash_recovery_serving' "$manager"
	expect_line "$service_log" '^service-manager: restarted' "the manager restarted the service"
	expect_line "$service_log" 'event=crash_recovery_serving' "harmonaized recovered its sessions"
	expect_line "$service_log" 'vm0\.sock\]: recovered after a crash' "the guest's session recovered"
else
	out=$("$hzctl" -s "$ctl" upgrade 2>&1) || fail "hzctl upgrade: $out"
	say "$out"
	grep -q "handed over to process" <<<"$out" || fail "hzctl upgrade named no new process: $out"
fi
second=$(service_pid) || fail "hzctl status after the $mode"
[ "$second" != "$first" ] || fail "the service is still process $first"
[ "$mode" = upgrade ] && HZ_PIDS+=("$second")  # stopped with the rest when the test ends
kill -0 "$first" 2>/dev/null && sleep 1
kill -0 "$first" 2>/dev/null && fail "the old process $first is still running"
say "process $first replaced by $second"

rc=0
wait "$guest" || rc=$?
grep -a 'HZ-EVENT\|HZ-UPGRADE\|hz_drvtest: FAIL\|hz_libtest: FAIL' "$log" | sed 's/^/[guest] /' || true
[ "$rc" -eq 0 ] || fail "the guest test failed (run-guest.sh exit $rc)"
# MAINTENANCE (1) SERVICE_RESTARTED (4): duration 0, device_index 0xFFFFFFFF (SPEC.md §8.3.2).
expect_line "$log" '^HZ-EVENT: seq 1 topic 1 kind 4 flags 0x0 deadline_s 0 payload 0000000000000000ffffffff' \
	"SERVICE_RESTARTED arrived on the subscribed queue"
expect_line "$log" '^HZ-EVENTS: acked seq 1: cursor 1 next_seq 2' "acknowledged to the new process"
expect_line "$log" '^HZ-UPGRADE: device kept' "device kept"
expect_line "$log" '^HZ-RESULT: PASS driver_upgrade' "guest result"
kill -0 "$second" 2>/dev/null || fail "the new process $second is gone"
say "PASS"
