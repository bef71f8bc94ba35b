#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd --rbd against a one-node Ceph cluster (scripts/ceph-fixture.sh):
#   1. nbdcopy round trip: 64 MiB of random data in, the whole image out,
#      through two hardware queues (two image handles); and the same bytes
#      as another librbd client (rbd export) sees them.
#   2. discard and write-zeroes (qemu-io): both read back as zeros, the
#      bytes around them are kept, and rbd export agrees.
#   3. flush ordering: writes then a flush through rqnbd; once the flush is
#      answered, another client (rbd export, rqnbd still running) reads
#      every one of those writes.
#   4. fio verify (nbd engine, crc32c) with mq-deadline.
#   5. rqnbd's driver line (printed at exit) counts no errors.
#   6. POOL/IMAGE@SNAP: exported read-only, reads the data as it was when
#      the snapshot was taken, refuses writes.
#   7. an image with exclusive-lock: one handle shared by two hw queues
#      (said on stderr), nbdcopy round trip.
#
# usage: rbd_nbd.sh RQNBD FIXTURE   Skips (77) when the cluster cannot start
# or a client is missing.
set -u
. "$(dirname "$0")/rbd_lib.sh"
need nbdcopy qemu-io python3
rbd_init "$1" "$2"
cd "$tmp" || fail "no temporary directory"

size=$(rbd -c "$CEPH_CONF" info --format json "$RBD_SPEC" | python3 -c 'import json,sys; print(json.load(sys.stdin)["size"])')

# 1. round trip
head -c 64M /dev/urandom >in.bin
rbd_start --queues 2
timeout 60 nbdcopy in.bin "$uri" || fail "nbdcopy to rqnbd failed"
timeout 60 nbdcopy "$uri" out.bin || fail "nbdcopy from rqnbd failed"
[ "$(stat -c %s out.bin)" = "$size" ] || fail "read back $(stat -c %s out.bin) bytes, want $size"
cmp -n 67108864 in.bin out.bin || fail "nbdcopy round trip: data differs"
cmp -n $((size - 67108864)) -i 67108864 out.bin /dev/zero || fail "bytes past the copy are not zeros"
rbd_export exp.bin || fail "rbd export failed"
cmp -n 67108864 in.bin exp.bin || fail "rbd export disagrees with what rqnbd wrote"
echo "nbdcopy round trip, 64 MiB over 2 queues: ok"

# 2. discard and write-zeroes, one crossing an object boundary (4 MiB)
qio() { timeout 60 qemu-io -f raw "$uri" "$@" >qio.out 2>&1 || { cat qio.out; fail "qemu-io $*"; }
	grep -qi "fail\|error" qio.out && { cat qio.out; fail "qemu-io: $*"; }; return 0; }
qio -c "write -P 0x5a 3M 2M" -c "discard 3584K 512K" -c "write -z 4M 256K" -c flush
qio -c "read -P 0x5a 3M 512K" -c "read -P 0 3584K 512K" -c "read -P 0 4M 256K" \
    -c "read -P 0x5a 4352K 768K"
rbd_export exp.bin || fail "rbd export failed"
python3 - <<'PY' || fail "rbd export after discard/write-zeroes differs"
d = open("exp.bin", "rb").read()
M, K = 1 << 20, 1 << 10
assert d[3*M:3584*K] == b"\x5a" * (512*K)
assert d[3584*K:4352*K] == bytes(768*K)
assert d[4352*K:5*M] == b"\x5a" * (768*K)
PY
echo "discard and write-zeroes across an object boundary: ok"

# 3. flush ordering: what was written before an answered flush is on the cluster
qio -c "write -P 0x11 40M 1M" -c "write -P 0x22 41M 3M" -c "write -P 0x33 44M 512K" -c flush
rbd_export exp.bin || fail "rbd export failed"
python3 - <<'PY' || fail "writes before a flush are not all on the cluster"
d = open("exp.bin", "rb").read()
M, K = 1 << 20, 1 << 10
assert d[40*M:41*M] == b"\x11" * M
assert d[41*M:44*M] == b"\x22" * (3*M)
assert d[44*M:44*M+512*K] == b"\x33" * (512*K)
PY
echo "flush ordering (rbd export after the flush sees every write): ok"

# 4. fio verify through the nbd engine, with mq-deadline
nbd_stop
if fio --enghelp 2>/dev/null | grep -qw nbd; then
	rbd_start --queues 2 --sched mq-deadline
	timeout 120 fio --name=rbd-verify --ioengine=nbd --uri="$uri" --rw=randwrite \
		--bsrange=4k-256k --iodepth=16 --numjobs=2 --size=16m --offset_increment=24m \
		--offset=96m --verify=crc32c --verify_fatal=1 --do_verify=1 \
		--randrepeat=0 --verify_state_save=0 >fio.out 2>&1 || { cat fio.out; fail "fio verify failed"; }
	grep -q "err= 0" fio.out || { cat fio.out; fail "fio reported errors"; }
	nbd_stop
	echo "fio verify crc32c (4-256 KiB, mq-deadline): ok"
else
	echo "fio has no nbd engine: fio verify not run"
fi

# 5. the driver's own account
line=$(grep '^rbd: requests:' "$nbd_log" | head -n 1)
[ -n "$line" ] || fail "rqnbd printed no driver line"
echo "$line" | grep -q " 0 errors" || fail "the driver saw errors: $line"
echo "driver: ${line#rbd: }"

# 6. a snapshot: exported read-only, with the data of when it was taken
timeout 60 rbd -c "$CEPH_CONF" snap create "$RBD_SPEC@snap1" >/dev/null 2>&1 || fail "rbd snap create failed"
rbd_start --queues 2
qio -c "write -P 0x99 40M 1M"            # the image moves on after the snapshot
nbd_stop
nbd_start --rbd "$RBD_SPEC@snap1" --ceph-conf "$CEPH_CONF"
qio -r -c "read -P 0x11 40M 1M"
timeout 30 qemu-io -f raw "$uri" -c "write -P 0x98 40M 4k" >qio.out 2>&1
grep -qi "error\|fail\|read-only\|denied" qio.out || { cat qio.out; fail "a write to a snapshot export succeeded"; }
nbd_stop
grep -q "rbd/img@snap1" "$nbd_log" || fail "rqnbd did not name the snapshot"
echo "snapshot export: read-only, data as of the snapshot: ok"

# 7. an image with exclusive-lock (rbd create's default features): the hw
#    queues share one handle, and data round-trips
timeout 60 rbd -c "$CEPH_CONF" create --size 64M "$RBD_POOL/locked" >/dev/null 2>&1 || fail "rbd create failed"
nbd_start --rbd "$RBD_POOL/locked" --ceph-conf "$CEPH_CONF" --queues 2
head -c 32M in.bin >in32.bin
timeout 60 nbdcopy in32.bin "$uri" && timeout 60 nbdcopy "$uri" out32.bin || fail "nbdcopy on the locked image failed"
cmp -n 33554432 in32.bin out32.bin || fail "locked image: data differs"
nbd_stop
grep -q "1 handle for 2 hw queues (exclusive-lock: one shared handle)" "$nbd_log" ||
	fail "an exclusive-lock image did not get one shared handle"
echo "exclusive-lock image over 2 queues, one shared handle: ok"
echo PASS
