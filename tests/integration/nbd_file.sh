#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd --file: data copied in with nbdcopy is in the file itself once the
# server has stopped (SIGTERM drains, flushes, exits 0), and a new server on
# the same file serves it back.  Then SIGTERM and SIGINT while fio keeps
# four connections busy: the server still drains and exits 0 in time.
#
# usage: nbd_file.sh RQNBD    Skips (77) without nbdcopy.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need nbdcopy truncate
nbd_init "$1"

truncate -s 32M "$tmp/disk.img"
head -c 32M /dev/urandom >"$tmp/data"
nbd_start --file "$tmp/disk.img" --queues 2 --sched none
timeout 60 nbdcopy "$tmp/data" "$uri" || fail "nbdcopy in failed"
nbd_stop
cmp "$tmp/data" "$tmp/disk.img" || fail "the file does not hold the data after stop"
echo "file holds the 32 MiB written through rqnbd"

nbd_start --file "$tmp/disk.img"
timeout 60 nbdcopy "$uri" "$tmp/out" || fail "nbdcopy out failed"
cmp "$tmp/data" "$tmp/out" || fail "data read back differs"
echo "a new server reads it back"
nbd_stop

if command -v fio >/dev/null 2>&1 && fio --enghelp 2>/dev/null | grep -qw nbd; then
	for sig in TERM INT; do
		nbd_start --file "$tmp/disk.img" --queues 2
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
