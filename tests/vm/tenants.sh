#!/usr/bin/env bash
# Guests and a host process of one harmonaized, by tenant.
#   mixed:   vm_mixed_tenant_ranks. A host process of tenant A on virtio-user
#            (vm-host-rank) creates a uid and is rank 0; two guests of tenant
#            A get it as hz.uid= and are ranks 1 and 2. ALLREDUCE and ALLGATHER
#            of several sizes must be correct on all three.
#   refused: vm_other_tenant_refused. A guest of tenant B tries COMM_INIT with
#            a uid of tenant A and must see EPERM.
# Usage: tenants.sh MODE HARMONAIZED HZCTL VM_HOST_RANK VM_DIR
set -euo pipefail
mode=$1 harmonaized=$2 hzctl=$3 host_rank=$4
case $mode in
mixed) export HZ_TEST=vm_mixed_tenant_ranks ;;
refused) export HZ_TEST=vm_other_tenant_refused ;;
*) echo "unknown mode $mode" >&2; exit 2 ;;
esac
HZ_VM_DIR=$5
source "$(dirname "$0")/lib.sh"

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
hz_spawn "$HZ_WORK/$mode-harmonaized.log" "$harmonaized" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level info
service=$HZ_LAST_PID
hz_wait_socket "$ctl" "$service"
bind() { # TENANT SOCKET
	"$hzctl" -s "$ctl" vm bind --tenant "$1" --socket "$2.sock" >/dev/null || fail "hzctl vm bind $2"
	hz_wait_socket "$HZ_WORK/vms/$2.sock" "$service"
}
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create tenant-a"

guest() { # NAME TEST APPEND
	"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "$mode-$1" --socket "$HZ_WORK/vms/$1.sock" \
		--test "$2" --num-vqs 6 --vq-size 128 --config-size 64 --timeout 170 --append "$3" \
		--log "$HZ_WORK/$mode-$1-guest.log" >/dev/null 2>&1
}

# Waits for the host process's uid line.
host_uid() { # LOG PID
	local uid=
	for _ in $(seq 300); do
		uid=$(grep -a -o -m1 'HZ-UID: [0-9a-f]\{64\}' "$1" 2>/dev/null | cut -d' ' -f2 || true)
		[ -n "$uid" ] && break
		kill -0 "$2" 2>/dev/null || fail "the host process ended without a uid: $(tail -n3 "$1")"
		sleep 0.1
	done
	[ -n "$uid" ] || fail "the host process printed no uid"
	echo "$uid"
}

if [ "$mode" = mixed ]; then
	bind tenant-a host
	bind tenant-a vm1
	bind tenant-a vm2
	hostlog=$HZ_WORK/mixed-host-rank.log
	hz_spawn "$hostlog" timeout 170 "$host_rank" ranks "$HZ_WORK/vms/host.sock" 3
	host=$HZ_LAST_PID
	uid=$(host_uid "$hostlog" "$host")
	say "the host process (rank 0, virtio-user) created uid $uid"
	guest vm1 xvm_ranks "hz.uid=$uid hz.nranks=3 hz.rank=1" &
	g1=$!
	guest vm2 xvm_ranks "hz.uid=$uid hz.nranks=3 hz.rank=2" &
	g2=$!
	HZ_PIDS+=("$g1" "$g2")
	rc1=0 rc2=0 rch=0
	wait "$g1" || rc1=$?
	wait "$g2" || rc2=$?
	wait "$host" || rch=$?
	sed 's/^/[host] /' "$hostlog"
	for vm in vm1 vm2; do
		grep -a 'hz_drvtest\|HZ-RESULT' "$HZ_WORK/mixed-$vm-guest.log" | sed "s/^/[$vm] /" || true
	done
	[ "$rch" -eq 0 ] || fail "the host rank failed (exit $rch)"
	[ "$rc1" -eq 0 ] || fail "rank 1's guest failed (exit $rc1)"
	[ "$rc2" -eq 0 ] || fail "rank 2's guest failed (exit $rc2)"
	expect_line "$hostlog" 'rank 0 of 3: every size correct' "rank 0 (host, virtio-user)"
	expect_line "$HZ_WORK/mixed-vm1-guest.log" 'rank 1: region of [0-9]+ bytes in [0-9]+ extents' "rank 1's region"
	expect_line "$HZ_WORK/mixed-vm1-guest.log" 'rank 1 of 3: every size correct' "rank 1 (vm1, driver)"
	expect_line "$HZ_WORK/mixed-vm2-guest.log" 'rank 2 of 3: every size correct' "rank 2 (vm2, driver)"
	expect_line "$HZ_WORK/mixed-vm2-guest.log" 'ALLGATHER of 200003 floats correct' "rank 2's largest all-gather"
else
	"$hzctl" -s "$ctl" tenant create tenant-b >/dev/null || fail "hzctl tenant create tenant-b"
	bind tenant-a host
	bind tenant-b vmb
	hostlog=$HZ_WORK/refused-host-uid.log
	hz_spawn "$hostlog" "$host_rank" uid "$HZ_WORK/vms/host.sock"
	uid=$(host_uid "$hostlog" "$HZ_LAST_PID")
	say "tenant A's host process created uid $uid"
	rc=0
	guest vmb other_tenant "hz.uid=$uid" || rc=$?
	grep -a 'hz_drvtest\|HZ-RESULT' "$HZ_WORK/refused-vmb-guest.log" | sed "s/^/[vmb] /" || true
	[ "$rc" -eq 0 ] || fail "tenant B's guest failed (exit $rc)"
	expect_line "$HZ_WORK/refused-vmb-guest.log" "another tenant's uid: error 0 status EPERM" "tenant B refused"
fi
"$hzctl" -s "$ctl" status >/dev/null || fail "hzctl status after the test"
say "PASS"
