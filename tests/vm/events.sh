#!/usr/bin/env bash
# vm_driver_events: one VM against harmonaized, the whole path of a tenant.
# The guest (tests/vm/guest/tests/driver_events) loads the driver, says
# HELLO, registers a region, runs a one-rank ALLREDUCE, subscribes to events
# and prints "HZ-EVENTS: subscribed". Only then does the host inject two
# events with `hzctl event inject`; the guest must receive both through the
# driver's event queue (read()/poll()) with the seq, topic, kind, flags,
# deadline and payload the service published, and acknowledge them.
# Usage: events.sh HARMONAIZED HZCTL VM_DIR
set -euo pipefail
harmonaized=$1 hzctl=$2
export HZ_TEST=vm_driver_events
HZ_VM_DIR=$3
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
hz_spawn "$HZ_WORK/events-harmonaized.log" "$harmonaized" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level info
service=$HZ_LAST_PID
hz_wait_socket "$ctl" "$service"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket vm0.sock >/dev/null || fail "hzctl vm bind"
hz_wait_socket "$HZ_WORK/vms/vm0.sock" "$service"

log=$HZ_WORK/events-guest.log
"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name driver_events --socket "$HZ_WORK/vms/vm0.sock" \
	--test driver_events --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 \
	--log "$log" >/dev/null 2>&1 &
guest=$!
HZ_PIDS+=("$guest")

# Inject only once the guest's subscription is in place.
hz_wait_line "$log" '^HZ-EVENTS: subscribed' "$guest"
expect_line "$log" '^HZ-EVENTS: subscribed cursor 0 next_seq 1 ' "guest subscribed"

inject() { # prints "SEQ DEADLINE_S" from hzctl's JSON reply
	"$hzctl" -s "$ctl" --json event inject --tenant tenant-a "$@" |
		python3 -c 'import json, sys; r = json.load(sys.stdin)["result"]; print(r["seq"], r.get("deadline_s", 0))' ||
		fail "hzctl event inject $*"
}
read -r seq1 deadline1 < <(inject --topic maintenance --kind scheduled --deadline-s 900 \
	--data '{"duration_s": 605, "device_index": 2, "approvable": true}')
say "injected maintenance/scheduled: seq $seq1 deadline_s $deadline1"
read -r seq2 _ < <(inject --topic congestion --kind fabric --data '{"level": 2}')
say "injected congestion/fabric: seq $seq2"
if [ "$seq1" != 1 ] || [ "$seq2" != 2 ]; then
	fail "the tenant's log gave seqs $seq1 and $seq2, expected 1 and 2"
fi
if [ "$deadline1" -le 0 ] || [ $((deadline1 % 10)) -ne 0 ]; then fail "deadline_s $deadline1 is not coarse"; fi

rc=0
wait "$guest" || rc=$?
grep -a 'HZ-EVENT\|hz_drvtest: FAIL\|hz_libtest: FAIL' "$log" | sed 's/^/[guest] /' || true
[ "$rc" -eq 0 ] || fail "the guest test failed (run-guest.sh exit $rc)"
expect_line "$log" "hz_drvtest: HELLO version" "HELLO"
expect_line "$log" "hz_drvtest: region checks passed" "region registered"
expect_line "$log" 'hz_libtest: registered, blocking ALLREDUCE of [0-9]+ floats correct' "one-rank ALLREDUCE"
# MAINTENANCE (1) SCHEDULED (0), APPROVABLE, duration 600 s (605 rounded
# down), device 2; CONGESTION (4) FABRIC (0) at level 2 (SPEC.md §8.3).
expect_line "$log" "^HZ-EVENT: seq 1 topic 1 kind 0 flags 0x1 deadline_s $deadline1 payload 58020000000000000200000000000000" "maintenance event"
expect_line "$log" "^HZ-EVENT: seq 2 topic 4 kind 0 flags 0x0 deadline_s 0 payload 0200000000000000" "congestion event"
expect_line "$log" '^HZ-EVENTS: acked seq 2: cursor 2 next_seq 3' "acknowledged"
expect_line "$log" '^HZ-RESULT: PASS driver_events' "guest result"
expect_line "$HZ_WORK/events-harmonaized.log" 'event=event_injected tenant=tenant-a topic=1 kind=0 seq=1' "harmonaized published"
say "PASS"
