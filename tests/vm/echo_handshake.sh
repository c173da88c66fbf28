#!/usr/bin/env bash
# vm_echo_handshake: a real QEMU guest sees the HarmonAIze device (virtio ID
# 21) served by vdev-echo-backend, reads its config space, and a driver bound
# to it completes the full vhost-user set-up (memory table, rings) and one
# echo round trip. Evidence comes from the guest's own console and from the
# back-end's message log.
# Usage: echo_handshake.sh ECHO_BACKEND VM_DIR
set -euo pipefail
export HZ_TEST=vm_echo_handshake
HZ_VM_DIR=$2
source "$(dirname "$0")/lib.sh"
backend=$1

hz_workdir
sock=$HZ_WORK/echo.sock
hz_spawn "$HZ_WORK/echo-backend.log" "$backend" --socket "$sock" --queues 3 --config-size 64 --log-level debug
hz_wait_socket "$sock" "$HZ_LAST_PID"

rc=0
"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name echo-handshake --socket "$sock" \
	--test echo_handshake --num-vqs 3 --config-size 64 --timeout 150 \
	--log "$HZ_WORK/echo-guest.log" || rc=$?
guest=$HZ_WORK/echo-guest.log
be=$HZ_WORK/echo-backend.log
[ "$rc" -eq 0 ] || fail "the guest test failed (run-guest.sh exit $rc)"

# What the guest saw: the device ID, the config space, the driver's round trip.
expect_line "$guest" 'device=0x0015 vendor=0x1af4' "guest enumerates virtio ID 21"
# The echo device's config: "ECHO", 3 queues (LE16), 0, 0, then byte i = i.
expect_line "$guest" 'hz_echo_test virtio[0-9]+: device id 21 config 4543484f0300000008090a0b0c0d0e0f' \
	"guest reads the back-end's config space"
expect_line "$guest" 'PASS echo round trip: 27 bytes' "echo round trip"
expect_line "$guest" '^HZ-RESULT: PASS echo_handshake' "guest result"

# What the back-end saw: the handshake through ring set-up.
for msg in GET_FEATURES GET_PROTOCOL_FEATURES SET_OWNER GET_CONFIG SET_FEATURES \
	SET_VRING_NUM SET_VRING_ADDR SET_VRING_BASE SET_VRING_KICK SET_VRING_CALL SET_VRING_ENABLE; do
	expect_line "$be" "\\b$msg\\b" "back-end received $msg"
done
# Guest RAM arrives as one SET_MEM_TABLE, or region by region (ADD_MEM_REG)
# when the back-end offers CONFIGURE_MEM_SLOTS.
expect_line "$be" '\b(SET_MEM_TABLE|ADD_MEM_REG)\b.*fds=[1-8]' "back-end received the guest memory table"
expect_line "$be" 'queue 0 running' "queue 0 started"
say "PASS"
