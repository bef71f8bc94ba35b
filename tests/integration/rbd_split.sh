#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# No librbd call of the RBD driver spans two RADOS objects, counted on the
# OSD: rbdq --write-only writes 16 MiB as 256 KiB bios in one plug (merged
# into object-sized requests) on a one-node cluster whose image has 4 MiB
# objects and only the layering feature, so every RADOS write is a data
# write and the OSD's op_w counter (perf dump) counts them.
#   aligned (offset 0)      4 requests, 4 calls, no split; the OSD's op_w
#                           rises by the calls (plus whatever opening the
#                           image costs: K, measured here)
#   offset 4032 KiB         the bios cross boundaries: the library cuts them
#                           there (chunk_sectors = the object size) and no
#                           merge crosses one, so at least 5 requests (5
#                           objects touched), one call each, none left for
#                           the driver to split; op_w rises by exactly
#                           calls + K
#   same, --span-objects    fewer calls than objects touched: op_w rises by
#                           more than calls + K (librbd cut them): the
#                           check above would catch a driver that did not
#                           split
# Also: rbdq's full run (write, read back, write-zeroes, discard) at that
# offset, over two queues.
#
# usage: rbd_split.sh RBDQ FIXTURE   Skips (77) when the cluster cannot start.
set -u
. "$(dirname "$0")/rbd_lib.sh"
rbdq=$1
[ -x "$rbdq" ] || fail "no rbdq at $rbdq"
# nbd_init only needs an executable; rqnbd is not used here
rbd_init "$rbdq" "$2"
rbdq=$rqnbd   # made absolute by nbd_init
cd "$tmp" || fail "no temporary directory"

# run LABEL ARGS...: rbdq --json --write-only; sets calls, split, writes, delta
run() {
	local label=$1 before after out
	shift
	before=$(osd_ops w) || fail "no OSD perf counters"
	out=$(timeout 60 "$rbdq" --ceph-conf "$CEPH_CONF" --json --write-only "$@" "$RBD_SPEC" 16) ||
		fail "rbdq $label failed: $out"
	after=$(osd_ops w) || fail "no OSD perf counters"
	delta=$((after - before))
	read -r writes calls split <<<"$(echo "$out" | python3 -c 'import json, sys
j = json.load(sys.stdin)
print(j["writes"], j["write_calls"], j["split"])')"
	echo "$label: $writes write requests, $calls librbd write calls, $split split; OSD op_w +$delta"
}

run aligned
[ "$split" = 0 ] || fail "aligned writes were split"
[ "$writes" = 4 ] || fail "16 MiB of 256 KiB bios in one plug made $writes requests, want 4 (object-sized)"
k=$((delta - calls))
[ $k -ge 0 ] || fail "the OSD counted fewer writes ($delta) than calls ($calls)"

run unaligned --offset 4032K
[ "$split" = 0 ] || fail "chunk_sectors: $split requests still crossed an object boundary"
[ "$writes" -ge 5 ] || fail "16 MiB at 4032 KiB touches 5 objects: $writes requests"
[ "$calls" = "$writes" ] || fail "$writes requests took $calls librbd calls"
[ $((delta - calls)) = $k ] || fail "OSD op_w +$delta for $calls calls (+$k): a call spanned two objects"

run spanning --offset 4032K --span-objects
[ $((delta - calls)) -gt $k ] || fail "--span-objects: OSD op_w +$delta for $calls calls: the check cannot tell"

out=$(timeout 60 "$rbdq" --ceph-conf "$CEPH_CONF" --queues 2 --offset 4032K "$RBD_SPEC" 16) ||
	fail "rbdq full run failed: $out"
echo "$out"
echo "$out" | grep -q "read back: same" || fail "rbdq: read back differs"
echo "$out" | grep -q "discard: zeros" || fail "rbdq: write-zeroes or discard did not read as zeros"
echo PASS
