#!/usr/bin/env bash
# vm_multi_vm_allreduce: two guests of one tenant on one harmonaized. Rank 0's
# guest creates a communicator uid and prints it; the host boots rank 1's guest
# with that uid; both ranks' ALLREDUCE results are checked in guest memory.
# Usage: multi_vm.sh HARMONAIZED HZCTL VM_DIR
set -euo pipefail
harmonaized=$1 hzctl=$2
export HZ_TEST=vm_multi_vm_allreduce
HZ_VM_DIR=$3
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
hz_spawn "$HZ_WORK/multi-harmonaized.log" "$harmonaized" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level info
service=$HZ_LAST_PID
hz_wait_socket "$ctl" "$service"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
for vm in vm0 vm1; do
	"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket "$vm.sock" >/dev/null || fail "hzctl vm bind $vm"
	hz_wait_socket "$HZ_WORK/vms/$vm.sock" "$service"
done

guest() { # NAME TEST [APPEND]
	"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "multi-$1" --socket "$HZ_WORK/vms/$1.sock" \
		--test "$2" --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 --append "${3:-}" \
		--log "$HZ_WORK/multi-$1-guest.log" >/dev/null 2>&1
}
guest vm0 xvm_rank0 &
rank0=$!
HZ_PIDS+=("$rank0")
uid=
for _ in $(seq 1200); do
	uid=$(grep -a -o -m1 'HZ-UID: [0-9a-f]\{64\}' "$HZ_WORK/multi-vm0-guest.log" 2>/dev/null | cut -d' ' -f2 || true)
	[ -n "$uid" ] && break
	kill -0 "$rank0" 2>/dev/null || fail "rank 0's guest ended without printing a uid"
	sleep 0.1
done
[ -n "$uid" ] || fail "rank 0's guest printed no uid"
say "rank 0 created uid $uid"
rc1=0
guest vm1 xvm_rank1 "hz.uid=$uid" || rc1=$?
rc0=0
wait "$rank0" || rc0=$?
for vm in vm0 vm1; do
	grep -a 'hz_drvtest\|HZ-RESULT' "$HZ_WORK/multi-$vm-guest.log" | sed "s/^/[$vm] /" || true
done
[ "$rc0" -eq 0 ] || fail "rank 0's guest failed (exit $rc0)"
[ "$rc1" -eq 0 ] || fail "rank 1's guest failed (exit $rc1)"
expect_line "$HZ_WORK/multi-vm0-guest.log" 'rank 0: ALLREDUCE of 4096 floats correct' "rank 0 (vm0) result"
expect_line "$HZ_WORK/multi-vm1-guest.log" 'rank 1: ALLREDUCE of 4096 floats correct' "rank 1 (vm1) result"
say "PASS"
