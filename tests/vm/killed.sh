#!/usr/bin/env bash
# vm_killed_mid_collective: a host process (rank 0, virtio-user) and two
# guests (ranks 1 and 2) of one tenant reduce once; then rank 2's QEMU is
# killed while the others wait in the next ALLREDUCE. They must get EABORTED
# or ETIMEDOUT in bounded time, harmonaized must stay healthy, and a new
# communicator of the survivors (uid from rank 1's guest) must work.
# Usage: killed.sh HARMONAIZED HZCTL VM_HOST_RANK VM_DIR
set -euo pipefail
harmonaized=$1 hzctl=$2 host_rank=$3
export HZ_TEST=vm_killed_mid_collective
HZ_VM_DIR=$4
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
hz_spawn "$HZ_WORK/killed-harmonaized.log" "$harmonaized" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level info
service=$HZ_LAST_PID
hz_wait_socket "$ctl" "$service"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
for s in host vm1 vm2; do
	"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket "$s.sock" >/dev/null || fail "hzctl vm bind $s"
	hz_wait_socket "$HZ_WORK/vms/$s.sock" "$service"
done

# Prints the first match of REGEX's second field in LOG, waiting while PID lives.
wait_line() { # LOG REGEX PID SECONDS
	local v=
	for _ in $(seq $(($4 * 10))); do
		v=$(grep -a -o -m1 -E "$2" "$1" 2>/dev/null | cut -d' ' -f2 || true)
		[ -n "$v" ] && break
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	echo "$v"
}

# The QEMU process among the descendants of PID.
qemu_of() {
	local pid
	for pid in $(pgrep -P "$1" || true); do
		if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = qemu-system-x86 ]; then
			echo "$pid"
			return
		fi
		qemu_of "$pid"
	done
}

fifo=$HZ_WORK/uid2.fifo
mkfifo "$fifo"
hostlog=$HZ_WORK/killed-host-rank.log
hz_spawn "$hostlog" timeout 170 "$host_rank" survive "$HZ_WORK/vms/host.sock" "$fifo"
host=$HZ_LAST_PID
uid=$(wait_line "$hostlog" 'HZ-UID: [0-9a-f]{64}' "$host" 30)
[ -n "$uid" ] || fail "the host process printed no uid: $(tail -n3 "$hostlog")"
say "the host process (rank 0) created uid $uid"

guest() { # NAME TEST
	"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "killed-$1" --socket "$HZ_WORK/vms/$1.sock" \
		--test "$2" --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 --append "hz.uid=$uid" \
		--log "$HZ_WORK/killed-$1-guest.log" >/dev/null 2>&1
}
guest vm1 kill_survivor &
g1=$!
guest vm2 kill_victim &
g2=$!
HZ_PIDS+=("$g1" "$g2")

ready=$(wait_line "$HZ_WORK/killed-vm2-guest.log" 'HZ-VICTIM-READY' "$g2" 160)
[ -n "$ready" ] || fail "rank 2's guest never finished its first ALLREDUCE"
# The survivors are in (or about to enter) the second ALLREDUCE: kill rank 2's QEMU.
sleep 2
qemu=$(qemu_of "$g2")
[ -n "$qemu" ] || fail "rank 2's QEMU not found"
kill -KILL "$qemu"
say "killed rank 2's QEMU (pid $qemu)"
killed_at=$SECONDS

uid2=$(wait_line "$HZ_WORK/killed-vm1-guest.log" 'HZ-UID2: [0-9a-f]{64}' "$g1" 120)
[ -n "$uid2" ] || fail "rank 1 did not start a new communicator"
say "rank 1 (vm1) got its error after $((SECONDS - killed_at)) s and created uid $uid2"
"$hzctl" -s "$ctl" status >/dev/null || fail "hzctl status after the kill"
echo "$uid2" >"$fifo"

rc1=0 rch=0
wait "$g1" || rc1=$?
wait "$host" || rch=$?
wait "$g2" 2>/dev/null || true
sed 's/^/[host] /' "$hostlog"
grep -a 'hz_drvtest\|HZ-RESULT' "$HZ_WORK/killed-vm1-guest.log" | sed "s/^/[vm1] /" || true
grep -a 'hz_drvtest' "$HZ_WORK/killed-vm2-guest.log" | sed "s/^/[vm2] /" || true
[ "$rch" -eq 0 ] || fail "the host rank failed (exit $rch)"
[ "$rc1" -eq 0 ] || fail "rank 1's guest failed (exit $rc1)"
expect_line "$hostlog" "ALLREDUCE with rank 2's VM gone: .* after [0-9]+ s" "rank 0's error"
expect_line "$HZ_WORK/killed-vm1-guest.log" "ALLREDUCE with rank 2's VM gone: status (EABORTED|ETIMEDOUT)" "rank 1's error"
expect_line "$hostlog" 'rank 0: ALLREDUCE among the survivors correct' "new communicator (host)"
expect_line "$HZ_WORK/killed-vm1-guest.log" 'rank 1: ALLREDUCE among the survivors correct' "new communicator (vm1)"
"$hzctl" -s "$ctl" status >/dev/null || fail "hzctl status at the end"
kill -0 "$service" || fail "harmonaized died"
say "PASS"
