#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# fio's nbd engine with verify=crc32c against rqnbd, once per scheduler the
# build offers on either front end (rqnbd [--front sq] --list-scheds): two jobs, each its own connection and
# region, 4 KiB random writes at iodepth 32, then verified reads; and a
# mixed-size run (4-128 KiB) over the file device on each front end (sq:
# cfq, or the first single-queue scheduler listed, at depth 8).
#
# usage: nbd_fio.sh RQNBD    Skips (77) without fio or its nbd engine.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need fio
fio --enghelp 2>/dev/null | grep -qw nbd || skip "fio has no nbd engine"
nbd_init "$1"
cd "$tmp" || fail "no temporary directory"

scheds=$("$rqnbd" --list-scheds) || fail "rqnbd --list-scheds failed"
[ -n "$scheds" ] || fail "no schedulers listed"

run_fio() { # NAME BS extra-args...
	local name=$1 bs=$2
	shift 2
	timeout 120 fio --name="$name" --ioengine=nbd --uri="$uri" --rw=randwrite \
		--bs="$bs" --iodepth=32 --numjobs=2 --size=24m --offset_increment=32m \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --randrepeat=0 --verify_state_save=0 \
		"$@" >"$tmp/fio.out" 2>&1 || { cat "$tmp/fio.out"; fail "fio $name failed"; }
	grep -q "err= 0" "$tmp/fio.out" || { cat "$tmp/fio.out"; fail "fio $name reported errors"; }
}

for s in $scheds; do
	nbd_start --memory 64M --sched "$s" --queues 2 --depth 64
	run_fio "verify-$s" 4k
	nbd_stop
	echo "fio verify crc32c, scheduler $s: ok"
done

# the single-queue front end too, under each of its schedulers
sq_scheds=$("$rqnbd" --front sq --list-scheds) || fail "rqnbd --front sq --list-scheds failed"
for s in $sq_scheds; do
	nbd_start --front sq --memory 64M --sched "$s" --depth 64
	run_fio "verify-sq-$s" 4k
	nbd_stop
	echo "fio verify crc32c, single queue, scheduler $s: ok"
done

truncate -s 64M "$tmp/disk.img"
nbd_start --file "$tmp/disk.img" --queues 2
run_fio verify-file 4k --bsrange=4k-128k --fsync=16
nbd_stop
echo "fio verify crc32c, file device, 4-128 KiB: ok"

sq_file_sched=$(echo "$sq_scheds" | grep -x cfq || echo "$sq_scheds" | head -n 1)
nbd_start --front sq --file "$tmp/disk.img" --queues 2 --depth 8 --sched "$sq_file_sched"
run_fio verify-file-sq 4k --bsrange=4k-128k --fsync=16
nbd_stop
echo "fio verify crc32c, file device, single queue, scheduler $sq_file_sched, 4-128 KiB: ok"
echo PASS
