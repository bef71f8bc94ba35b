#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd --file on one front end (mq, the default, or sq): data copied in
# with nbdcopy (random data around an 8 MiB run of zeros, which nbdcopy
# sends as zeroing requests) and a flush at the end reads back with the same
# sha256 through the server, and is in the file itself once the server has
# stopped (SIGTERM drains, flushes, exits 0); a new server on the same file
# serves it back.  On sq this is done once per scheduler the single-queue
# front end offers (noop, deadline, cfq), two workers and a depth of 8 so
# the scheduler has requests to hold.  Then SIGTERM and SIGINT while fio
# keeps four connections busy: the server still drains and exits 0 in time.
#
# usage: nbd_file.sh RQNBD [mq|sq]    Skips (77) without nbdcopy.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need nbdcopy truncate sha256sum
nbd_init "$1"
front=${2:-mq}

case $front in
mq)
	scheds=none
	shape="--queues 2"
	;;
sq)
	scheds=$("$rqnbd" --front sq --list-scheds) || fail "rqnbd --front sq --list-scheds failed"
	[ -n "$scheds" ] || fail "no single-queue schedulers listed"
	shape="--queues 2 --depth 8"
	;;
*)
	fail "front end must be mq or sq, not $front"
	;;
esac

sum() { sha256sum <"$1" | cut -d' ' -f1; }

{
	head -c 12M /dev/urandom
	head -c 8M /dev/zero
	head -c 12M /dev/urandom
} >"$tmp/data"
for s in $scheds; do
	rm -f "$tmp/disk.img" "$tmp/out"
	truncate -s 32M "$tmp/disk.img"
	# shellcheck disable=SC2086
	nbd_start --front "$front" --file "$tmp/disk.img" $shape --sched "$s"
	timeout 60 nbdcopy --flush "$tmp/data" "$uri" || fail "nbdcopy in failed ($s)"
	timeout 60 nbdcopy "$uri" "$tmp/out" || fail "nbdcopy out failed ($s)"
	[ "$(sum "$tmp/data")" = "$(sum "$tmp/out")" ] || fail "sha256 of the data read back differs ($s)"
	nbd_stop
	cmp "$tmp/data" "$tmp/disk.img" || fail "the file does not hold the data after stop ($s)"
	echo "$front, scheduler $s: 32 MiB in and out with equal sha256, in the file after stop"
done

rm -f "$tmp/out"
nbd_start --front "$front" --file "$tmp/disk.img"
timeout 60 nbdcopy "$uri" "$tmp/out" || fail "nbdcopy out failed"
cmp "$tmp/data" "$tmp/out" || fail "data read back differs"
echo "a new server reads it back"
nbd_stop

if command -v fio >/dev/null 2>&1 && fio --enghelp 2>/dev/null | grep -qw nbd; then
	for sig in TERM INT; do
		nbd_start --front "$front" --file "$tmp/disk.img" --queues 2
		timeout 60 fio --name=load --ioengine=nbd --uri="$uri" --rw=randrw --bs=64k \
			--iodepth=32 --numjobs=4 --size=32m --time_based --runtime=30 \
			>/dev/null 2>&1 &
		fio_pid=$!
		sleep 1.5
		if [ $sig = INT ]; then
			kill -INT "$nbd_pid"
		fi
		nbd_stop # SIGTERM (a second signal while stopping is harmless)
		wait "$fio_pid" 2>/dev/null
		echo "SIG$sig under load: drained and exited 0"
	done
else
	echo "fio with the nbd engine missing: no stop-under-load check"
fi
echo PASS
