#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd with qemu's NBD client: qemu-img info sees the size, qemu-img
# convert writes a raw image into the export, qemu-img compare finds them
# equal, and converting the export back out (to qcow2) gives the same data.
#
# usage: nbd_qemu.sh RQNBD    Skips (77) without qemu-img.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need qemu-img
nbd_init "$1"

nbd_start --memory 32M
timeout 30 qemu-img info --output=json "$uri" | grep -q '"virtual-size": 33554432' ||
	fail "qemu-img info does not report 32 MiB"
head -c 32M /dev/urandom >"$tmp/a.raw"
timeout 120 qemu-img convert -n -f raw -O raw "$tmp/a.raw" "$uri" || fail "convert in failed"
timeout 120 qemu-img compare -f raw -F raw "$tmp/a.raw" "$uri" || fail "compare after convert failed"
timeout 120 qemu-img convert -f raw -O qcow2 "$uri" "$tmp/b.qcow2" || fail "convert out failed"
timeout 120 qemu-img compare -f qcow2 -F raw "$tmp/b.qcow2" "$tmp/a.raw" || fail "the copy out differs"
echo "qemu-img: convert in, compare, convert out: equal"
nbd_stop
echo PASS
