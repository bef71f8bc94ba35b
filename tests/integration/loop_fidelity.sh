#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Merge fidelity against the live kernel: the same submission pattern (COUNT
# sequential 4 KiB writes, BATCH per plug, buffers never contiguous) goes
# through a loop device (block tracepoints count the requests its queue
# issues) and through rqbench over the null driver with the loop device's
# limits.  The request counts and sizes must be the same.
#
# usage: loop_fidelity.sh RQBENCH SEQWRITE COUNT BATCH
# Skips (77) without root, loop devices, io_uring or tracefs.
set -u
rqbench=$1 seqwrite=$2 count=$3 batch=$4
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root"
command -v losetup >/dev/null || skip "no losetup"
T=/sys/kernel/tracing
if [ ! -d $T/events/block ]; then
	mount -t tracefs nodev $T 2>/dev/null || skip "no tracefs"
fi
[ -d $T/events/block/block_rq_issue ] || skip "no block tracepoints"

img=$(mktemp /tmp/rq-loop.XXXXXX)
trace=$(mktemp /tmp/rq-trace.XXXXXX)
dev=
cleanup() {
	echo 0 > $T/tracing_on
	echo 0 > $T/events/block/block_rq_issue/enable
	[ -n "$dev" ] && losetup -d "$dev"
	rm -f "$img" "$trace"
}
trap cleanup EXIT
truncate -s $((count * 4096 + 1048576)) "$img"
dev=$(losetup -f --show --direct-io=on "$img") || skip "cannot set up a loop device"
q=/sys/block/$(basename "$dev")/queue
echo none > $q/scheduler
max_segments=$(cat $q/max_segments)
max_sectors_kb=$(cat $q/max_sectors_kb)
majmin=$(cat /sys/block/$(basename "$dev")/dev | tr : ,)

echo 0 > $T/tracing_on
echo > $T/trace
echo 1 > $T/events/block/block_rq_issue/enable
echo 1 > $T/tracing_on
"$seqwrite" "$dev" "$count" "$batch"
rc=$?
[ $rc = 77 ] && skip "no io_uring"
[ $rc = 0 ] || { echo "seqwrite failed ($rc)"; exit 1; }
echo 0 > $T/tracing_on
grep "block_rq_issue: $majmin " $T/trace > "$trace"
kernel_requests=$(grep -c . "$trace")
kernel_sizes=$(awk '{for (i = 1; i <= NF; i++) if ($i == "+") print $(i + 1) / 2 " KiB"}' "$trace" |
	sort | uniq -c | tr -s ' ' | tr '\n' ';')

json=$("$rqbench" --pattern write --threads 1 --bs 4096 --batch "$batch" --depth "$batch" \
	--max-segments "$max_segments" --max-sectors-kb "$max_sectors_kb" \
	--ops "$count" --warmup 0 --json) || { echo "rqbench failed"; exit 1; }
rq_requests=$(echo "$json" | sed -n 's/.*"requests":\([0-9]*\).*/\1/p')

echo "limits: max_segments $max_segments, max_sectors_kb $max_sectors_kb"
echo "kernel ($dev): $kernel_requests requests:$kernel_sizes"
echo "librequest:    $rq_requests requests"
if [ "$kernel_requests" != "$rq_requests" ]; then
	echo "FAIL: request counts differ"
	exit 1
fi
echo "PASS"
exit 0
