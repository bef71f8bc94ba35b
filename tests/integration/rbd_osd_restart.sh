#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# A cluster hiccup under rqnbd --rbd: nothing hangs.
#   1. An OSD restarted during I/O: fio (nbd engine, random 4-64 KiB writes
#      with crc32c verify, two connections, 8 MiB/s each so that the write
#      phase lasts about 8 s) runs while the only OSD stops
#      cleanly (memstore keeps its data) and starts again.  librbd resends
#      what was in flight: fio must end, within a bound, with every block
#      verified.
#   2. An OSD that stays down: with rados_osd_op_timeout 5 s (CEPH_ARGS), a
#      write fails with an error within the bound instead of waiting; once
#      the OSD is back, writes work again on the same rqnbd, and SIGTERM
#      drains, flushes and exits 0.
#   3. The cluster fences rqnbd's client (ceph osd blocklist add): a write
#      fails; once the fence is lifted the driver reopens the image on a new
#      connection (one reopen counted) and I/O works again.
# The bounds (timeout(1)) are generous; nothing here waits on a clock to
# synchronise: each step waits for observable state (fio's progress on the
# OSD's op counter, the OSD up in the map).
#
# usage: rbd_osd_restart.sh RQNBD FIXTURE   Skips (77) when the cluster
# cannot start or fio lacks its nbd engine.
set -u
. "$(dirname "$0")/rbd_lib.sh"
need fio qemu-io python3
fio --enghelp 2>/dev/null | grep -qw nbd || skip "fio has no nbd engine"
rbd_init "$1" "$2"
cd "$tmp" || fail "no temporary directory"

# 1. restart during I/O
rbd_start --queues 2
fio --name=restart --ioengine=nbd --uri="$uri" --rw=randwrite --bsrange=4k-64k \
	--iodepth=16 --numjobs=2 --size=64m --offset_increment=96m --rate=8m --verify=crc32c \
	--verify_fatal=1 --do_verify=1 --randrepeat=0 --verify_state_save=0 \
	>fio.out 2>&1 &
fio_pid=$!
bg_pids=$fio_pid
base=$(osd_ops w) || fail "no OSD perf counters"
for _ in $(seq 300); do      # fio under way: the OSD has seen 50 of its writes
	[ "$(osd_ops w)" -gt $((base + 50)) ] && break
	kill -0 $fio_pid 2>/dev/null || break
	sleep 0.1
done
kill -0 $fio_pid 2>/dev/null || { cat fio.out; fail "fio ended before the OSD stopped: nothing tested"; }
"$fixture" osd-stop "$CEPH_FIXTURE_DIR" 0 || fail "osd-stop failed"
echo "osd.0 stopped during I/O (fio still running: $(kill -0 $fio_pid 2>/dev/null && echo yes || echo no))"
"$fixture" osd-start "$CEPH_FIXTURE_DIR" 0 || fail "osd.0 did not start again"
echo "osd.0 up again"
for _ in $(seq 1200); do     # 120 s bound
	kill -0 $fio_pid 2>/dev/null || break
	sleep 0.1
done
if kill -0 $fio_pid 2>/dev/null; then
	kill -9 $fio_pid
	cat fio.out
	fail "fio still running 120 s after the OSD came back: requests hang"
fi
wait $fio_pid || { cat fio.out; fail "fio failed across the OSD restart"; }
grep -q "err= 0" fio.out || { cat fio.out; fail "fio reported errors across the OSD restart"; }
echo "fio write+verify across an OSD restart: ok"
nbd_stop

# 2. the OSD stays down: a clean error within the bound, then recovery
CEPH_ARGS="--rados_osd_op_timeout=5" rbd_start --queues 1
timeout 60 qemu-io -f raw "$uri" -c "write -P 0x77 0 64k" >qio.out 2>&1 || { cat qio.out; fail "write before the outage failed"; }
"$fixture" osd-stop "$CEPH_FIXTURE_DIR" 0 || fail "osd-stop failed"
start=$SECONDS
timeout 90 qemu-io -f raw "$uri" -c "write -P 0x78 1M 64k" >qio.out 2>&1
rc=$?
[ $rc = 124 ] && fail "a write with the OSD down did not end within 90 s"
grep -qi "error\|fail" qio.out || { cat qio.out; fail "a write with the OSD down succeeded?"; }
echo "write with the OSD down failed after $((SECONDS - start)) s: $(grep -i 'error\|fail' qio.out | head -n 1)"
"$fixture" osd-start "$CEPH_FIXTURE_DIR" 0 || fail "osd.0 did not start again"
timeout 60 qemu-io -f raw "$uri" -c "write -P 0x79 2M 64k" -c "read -P 0x77 0 64k" \
	-c "read -P 0x79 2M 64k" >qio.out 2>&1 || { cat qio.out; fail "I/O after the OSD came back failed"; }
grep -qi "error\|fail" qio.out && { cat qio.out; fail "I/O after the OSD came back failed"; }
echo "I/O after the OSD came back: ok"
nbd_stop
line=$(grep '^rbd: requests:' "$nbd_log" | tail -n 1)
echo "$line"
echo "$line" | grep -q " 0 errors" && fail "the driver counted no error for the write that failed"

# 3. the cluster fences the client (blocklist): requests fail, the handle
#    is reopened on a new connection once the fence is lifted
rbd_start --queues 1
qio() { timeout 60 qemu-io -f raw "$uri" "$@" >qio.out 2>&1; }
qio -c "write -P 0x41 0 64k" && ! grep -qi "error\|fail" qio.out || { cat qio.out; fail "write before the blocklisting failed"; }
timeout 30 ceph -c "$CEPH_CONF" osd blocklist add 127.0.0.1 >/dev/null 2>&1 || fail "ceph osd blocklist add failed"
qio -c "write -P 0x42 0 64k"
grep -qi "error\|fail" qio.out || { cat qio.out; fail "a write from a blocklisted client succeeded"; }
timeout 30 ceph -c "$CEPH_CONF" osd blocklist rm 127.0.0.1 >/dev/null 2>&1 || fail "ceph osd blocklist rm failed"
qio -c "write -P 0x43 64k 64k" -c "read -P 0x43 64k 64k" && ! grep -qi "error\|fail" qio.out ||
	{ cat qio.out; fail "I/O after the blocklisting was lifted failed"; }
nbd_stop
line=$(grep '^rbd: requests:' "$nbd_log" | tail -n 1)
echo "$line"
echo "$line" | grep -q "last errno 108" || fail "the blocklisted write did not fail with ESHUTDOWN"
echo "$line" | grep -q " 1 reopens" || fail "the handle was not reopened once"
echo "blocklisted: writes fail (OFFLINE), then the handle is reopened: ok"
echo PASS
