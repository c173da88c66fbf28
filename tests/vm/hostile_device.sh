#!/usr/bin/env bash
# vm_driver_hostile_device: the real driver against vm-hostile-backend, a
# device whose completions lie (lengths, statuses, request ids, events).
# Usage: hostile_device.sh HOSTILE_BACKEND VM_DIR
set -euo pipefail
export HZ_TEST=vm_driver_hostile_device
HZ_VM_DIR=$2
source "$(dirname "$0")/lib.sh"
backend=$1

hz_workdir
sock=$HZ_WORK/hostile.sock
hz_spawn "$HZ_WORK/hostile-backend.log" "$backend" --socket "$sock" --request-queues 1
hz_wait_socket "$sock" "$HZ_LAST_PID"
rc=0
"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name hostile-device --socket "$sock" \
	--test driver_hostile_device --num-vqs 3 --config-size 64 --timeout 170 \
	--log "$HZ_WORK/hostile-guest.log" || rc=$?
[ "$rc" -eq 0 ] || fail "the guest test failed (run-guest.sh exit $rc)"
expect_line "$HZ_WORK/hostile-guest.log" '^HZ-RESULT: PASS driver_hostile_device' "guest result"
# The back-end really told each lie.
for mode in 1 2 3 4 5 6; do
	expect_line "$HZ_WORK/hostile-backend.log" "mode $mode -> used" "back-end lie $mode sent"
done
expect_line "$HZ_WORK/hostile-backend.log" 'sent a short event' "back-end sent a short event"
expect_line "$HZ_WORK/hostile-backend.log" 'going silent' "back-end went silent"
expect_line "$HZ_WORK/hostile-backend.log" 'silent: holding opcode' "back-end held a request unanswered"
say "PASS"
