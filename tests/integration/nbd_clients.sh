#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd with libnbd's tools: nbdinfo reports the size and flags; nbdcopy
# copies 64 MiB of random data in and out (several connections at once: the
# export advertises multi-conn), compared by sha256; a trimmed and a zeroed
# range read back as zeros.
#
# usage: nbd_clients.sh RQNBD    Skips (77) without nbdinfo or nbdcopy.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need nbdinfo nbdcopy sha256sum
nbd_init "$1"

nbd_start --memory 64M --export-name disk
size=$(timeout 30 nbdinfo --size "nbd+unix:///disk?socket=$sock") || fail "nbdinfo failed"
[ "$size" = 67108864 ] || fail "nbdinfo says $size bytes, not 67108864"
info=$(timeout 30 nbdinfo "nbd+unix:///disk?socket=$sock") || fail "nbdinfo failed"
for want in "can_multi_conn: true" "can_flush: true" "can_fua: true" "can_trim: true" \
	    "can_zero: true" "is_read_only: false" "block_size_minimum: 512"; do
	echo "$info" | grep -q "$want" || fail "nbdinfo lacks '$want'"
done
timeout 30 nbdinfo --list "nbd+unix:///?socket=$sock" | grep -q 'export="disk"' ||
	fail "nbdinfo --list does not show the export"
echo "nbdinfo: size $size, flags ok"

head -c 64M /dev/urandom >"$tmp/in"
timeout 120 nbdcopy --connections=4 "$tmp/in" "nbd+unix:///disk?socket=$sock" ||
	fail "nbdcopy in failed"
timeout 120 nbdcopy --connections=4 "nbd+unix:///disk?socket=$sock" "$tmp/out" ||
	fail "nbdcopy out failed"
a=$(sha256sum <"$tmp/in" | cut -d' ' -f1)
b=$(sha256sum <"$tmp/out" | cut -d' ' -f1)
[ "$a" = "$b" ] || fail "64 MiB copied in and out differ ($a / $b)"
echo "nbdcopy: 64 MiB in and out, sha256 $a"

# a copy of zeros into the middle: nbdcopy trims or zeroes what is zero
head -c 8M /dev/zero >"$tmp/zero"
timeout 60 nbdcopy "$tmp/zero" "nbd+unix:///disk?socket=$sock" ||
	fail "nbdcopy of zeros failed"
timeout 60 nbdcopy "nbd+unix:///disk?socket=$sock" "$tmp/out" || fail "nbdcopy out failed"
{ head -c 8M /dev/zero; tail -c +$((8 * 1048576 + 1)) "$tmp/in"; } | cmp - "$tmp/out" ||
	fail "zeroed range does not read back as zeros"
echo "nbdcopy: zeroed 8 MiB read back as zeros"

nbd_stop
echo PASS
