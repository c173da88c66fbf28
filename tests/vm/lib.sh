# Helpers for the host halves of the VM tests. Sourced.
# shellcheck shell=bash
# shellcheck disable=SC2034 # HZ_TOP, HZ_LAST_PID are for the scripts that source this

HZ_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HZ_PIDS=()

say() { echo "[$HZ_TEST] $*"; }
fail() {
	echo "[$HZ_TEST] FAIL: $*" >&2
	exit 1
}

# A short private directory: vhost-user socket paths must fit sun_path.
hz_workdir() {
	HZ_WORK=$(mktemp -d "/tmp/hz-$HZ_TEST.XXXXXX")
	trap hz_cleanup EXIT
}

hz_cleanup() {
	local pid
	for pid in "${HZ_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${HZ_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	# Logs stay next to the guest logs for a post-mortem (those of the newer
	# guest kernels in a folder of each kernel's own).
	if [ -n "${HZ_WORK:-}" ] && [ -d "$HZ_WORK" ]; then
		local logs=$HZ_VM_DIR/logs${HZ_GUEST_KERNEL:+/$HZ_GUEST_KERNEL}
		mkdir -p "$logs"
		cp "$HZ_WORK"/*.log "$logs/" 2>/dev/null || true
		rm -rf "$HZ_WORK"
	fi
}

# Starts a background process (its output to LOG) and remembers it.
hz_spawn() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	HZ_PIDS+=($!)
	HZ_LAST_PID=$!
}

# Waits up to 20 s for a listening socket, failing early if its owner died.
hz_wait_socket() {
	local sock=$1 pid=$2
	for _ in $(seq 200); do
		[ -S "$sock" ] && return 0
		kill -0 "$pid" 2>/dev/null || fail "the process serving $sock exited"
		sleep 0.1
	done
	fail "$sock did not appear"
}

# Waits up to 150 s for a line matching the extended regex in FILE, while
# process PID runs (a guest reporting its progress on its console).
hz_wait_line() {
	local file=$1 regex=$2 pid=$3
	for _ in $(seq 1500); do
		grep -a -q -E -- "$regex" "$file" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
}

# Fails unless FILE has a line matching the extended regex; prints it.
expect_line() {
	local file=$1 regex=$2 what=$3 line
	line=$(grep -E -m1 -- "$regex" "$file") || fail "$what: no line matching '$regex' in $(basename "$file")"
	say "ok: $what: ${line//$'\r'/}"
}

# The emulated GPU server's image (vm-images/run-iommu-host.sh): vfio, the
# NIC stand-in's driver, stripped copies of harmonaized and hzctl (its
# initramfs lives in its RAM), tests/vm/guest/tests/lib_l1_host and TEST.
# Usage: l1_initramfs HARMONAIZED HZCTL OUT_DIR TEST [BUILD_INITRAMFS_ARGS...]
#   writes OUT_DIR/initramfs.gz
l1_initramfs() {
	local harmonaized=$1 hzctl=$2 out=$3 test=$4 tests=$HZ_TOP/tests/vm/guest/tests
	shift 4
	strip -o "$out/harmonaized" "$harmonaized"
	strip -o "$out/hzctl" "$hzctl"
	"$HZ_TOP/vm-images/build-initramfs.sh" --dir "$HZ_VM_DIR" --out "$out/initramfs.gz" \
		--kmod vfio-pci --kmod vfio_iommu_type1 --kmod e1000e \
		--dynamic "$out/harmonaized" --dynamic "$out/hzctl" \
		--test "$tests/lib_l1_host" --test "$tests/$test" "$@"
}

# Boots the emulated GPU server on OUT/initramfs.gz with the toolchain root
# and SHARE shared into it (libvirt runs there), prints the guest test's
# steps, and fails unless TEST passed and L2's QEMU ran the device.
# Usage: l1_run_libvirt OUT SHARE TEST TIMEOUT_S NODE_MIB
#   the guest's log: OUT/TEST-guest.log
l1_run_libvirt() {
	local out=$1 share=$2 test=$3 timeout_s=$4 node_mib=$5 t1=$SECONDS rc=0
	local log=$out/$test-guest.log
	"$HZ_TOP/vm-images/run-iommu-host.sh" --dir "$HZ_VM_DIR" --name "${test//_/-}" \
		--initrd "$out/initramfs.gz" --test "$test" --timeout "$timeout_s" --log "$log" \
		--node-mib "$node_mib" --share-root --share "$share" || rc=$?
	say "step guest took $((SECONDS - t1)) s"
	grep "^$test: \(step\|ok\)" "$log" | tr -d '\r' | sed "s/^/[$HZ_TEST] guest /" || true
	[ "$rc" -eq 0 ] || fail "the guest test failed (exit $rc; log: $log, files: $share)"
	expect_line "$log" "^HZ-RESULT: PASS $test" "L1's result"
	expect_line "$share/l2-qemu.log" 'vhost-user-test-device-pci' "L2's QEMU ran the device"
}
