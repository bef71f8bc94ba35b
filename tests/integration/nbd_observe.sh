#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd --trace DIR --iostat S: what a running server shows of its queue.
# nbdcopy writes 8 MiB into a memory export under mq-deadline, then
#   - SIGUSR1 prints the attributes: the "stat" line (the kernel's 17
#     /sys/block/X/stat fields) says 16384 sectors written, no reads, nothing
#     in flight; "inflight" is "0 0"; the write q2c histogram counts exactly
#     the stat line's completed writes; the server goes on serving
#   - an iostat line with writes in it appears within the interval after the
#     copy (waited for by reading the log, bounded at 20 s)
#   - after SIGTERM the trace's totals say 0 dropped, and blkparse reads the
#     per-CPU files: its completed writes add up to the 8 MiB written, and it
#     counts as many C as D events; btt computes Q2C
# Then two exports from --config, 4 MiB written to the second ("b:two"):
#   - SIGUSR1 prints each export's attributes under its name: the second's
#     stat line says 8192 sectors written, the default export's says none
#   - each export has its own iostat lines, the second's with writes in them
#   - each export has its own trace: rqnbd (the default export) and
#     rqnbd-b_two (the name made a file name); blkparse reads the second's
#     8192 sectors of completed writes, and the first's none
# Skips (77) without nbdcopy, blkparse or btt.
#
#   nbd_observe.sh RQNBD
set -u
. "$(dirname "$0")/nbd_lib.sh"
need nbdcopy blkparse btt
nbd_init "$1"

mkdir "$tmp/trace"
head -c $((8 << 20)) /dev/urandom >"$tmp/data"
nbd_start --memory 64M --sched mq-deadline --queues 1 --trace "$tmp/trace" --iostat 1
nbdcopy "$tmp/data" "$uri" || fail "nbdcopy into rqnbd"


kill -USR1 "$nbd_pid"
wait_log '^rqnbd: latency_hist: flush d2c'
stat=$(sed -n 's/^rqnbd: stat: *//p' "$nbd_log" | tail -n 1)
set -- $stat
[ $# = 17 ] || fail "stat has $# fields, not 17: $stat"
[ "$1" = 0 ] || fail "stat: $1 reads completed, none were made"
[ "$7" = 16384 ] || fail "stat: $7 sectors written, 8 MiB is 16384"
[ "$9" = 0 ] || fail "stat: $9 in flight once the copy is done"
writes=$5
grep -q '^rqnbd: inflight: *0 *0$' "$nbd_log" || fail "inflight is not '0 0'"
hist=$(sed -n 's/^rqnbd: latency_hist: write q2c//p' "$nbd_log" | tail -n 1 |
	tr ' ' '\n' | awk -F: 'NF == 2 { n += $2 } END { print n + 0 }')
[ "$hist" = "$writes" ] || fail "write q2c histogram holds $hist, stat says $writes writes"
wait_log '^rqnbd: iostat +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[1-9]'
kill -0 "$nbd_pid" 2>/dev/null || fail "rqnbd died on SIGUSR1"
nbdcopy "$uri" "$tmp/back" || fail "nbdcopy out of rqnbd after SIGUSR1"
cmp -n $((8 << 20)) "$tmp/data" "$tmp/back" || fail "data read back differs"
nbd_stop

grep -qE "^rqnbd: trace $tmp/trace/rqnbd: [1-9][0-9]* events, 0 dropped" "$nbd_log" ||
	fail "no trace totals with 0 dropped"
(cd "$tmp/trace" && blkparse -i rqnbd >"$tmp/parsed" 2>&1) || fail "blkparse"
# sectors of the completed writes (C events: "... C W SECTOR + N [err]")
sectors=$(awk '$6 == "C" && $7 ~ /W/ && $9 == "+" { n += $10 } END { print n + 0 }' "$tmp/parsed")
[ "$sectors" = 16384 ] || fail "blkparse: $sectors sectors of writes completed, 8 MiB is 16384"
d=$(awk '$6 == "D"' "$tmp/parsed" | wc -l)
c=$(awk '$6 == "C"' "$tmp/parsed" | wc -l)
[ "$d" -gt 0 ] && [ "$d" = "$c" ] || fail "blkparse: $d D events, $c C events"
(cd "$tmp/trace" && blkparse -q -i rqnbd -d "$tmp/bin" >/dev/null 2>&1 &&
	btt -i "$tmp/bin" >"$tmp/btt" 2>&1) || fail "btt"
grep -q '^Q2C ' "$tmp/btt" || fail "btt computed no Q2C"

# several exports: each watched under its own name
mkdir "$tmp/trace2"
: >"$nbd_log"
cat >"$tmp/two.conf" <<EOF
[export one]
backend = memory 16M
default = yes

[export b:two]
backend = memory 16M
sched = mq-deadline
EOF
nbd_start --config "$tmp/two.conf" --trace "$tmp/trace2" --iostat 1
head -c $((4 << 20)) "$tmp/data" >"$tmp/data4"
nbdcopy "$tmp/data4" "nbd+unix:///b:two?socket=$sock" || fail "nbdcopy into export b:two"
kill -USR1 "$nbd_pid"
wait_log '^rqnbd: b:two: latency_hist: flush d2c'
set -- $(sed -n 's/^rqnbd: b:two: stat: *//p' "$nbd_log" | tail -n 1)
[ $# = 17 ] && [ "$7" = 8192 ] || fail "export b:two: stat is not 17 fields with 8192 sectors written: $*"
set -- $(sed -n 's/^rqnbd: one: stat: *//p' "$nbd_log" | tail -n 1)
[ $# = 17 ] && [ "$7" = 0 ] || fail "export one: stat is not 17 fields with nothing written: $*"
wait_log '^rqnbd: b:two: iostat +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[1-9]'
grep -qE '^rqnbd: one: iostat +[0-9.]+ ' "$nbd_log" || fail "no iostat line of export one"
nbd_stop
for n in rqnbd rqnbd-b_two; do
	grep -qE "^rqnbd: trace $tmp/trace2/$n: [0-9]+ events, 0 dropped" "$nbd_log" ||
		fail "no trace totals of $n with 0 dropped"
done
(cd "$tmp/trace2" && blkparse -i rqnbd-b_two >"$tmp/parsed2" 2>&1) || fail "blkparse rqnbd-b_two"
sectors=$(awk '$6 == "C" && $7 ~ /W/ && $9 == "+" { n += $10 } END { print n + 0 }' "$tmp/parsed2")
[ "$sectors" = 8192 ] || fail "blkparse rqnbd-b_two: $sectors sectors written, 4 MiB is 8192"
(cd "$tmp/trace2" && blkparse -i rqnbd >"$tmp/parsed1" 2>&1) || fail "blkparse rqnbd (two exports)"
sectors=$(awk '$6 == "C" && $7 ~ /W/ && $9 == "+" { n += $10 } END { print n + 0 }' "$tmp/parsed1")
[ "$sectors" = 0 ] || fail "blkparse rqnbd: $sectors sectors written to the default export, none were"
echo "ok: stat, inflight, latency_hist, iostat line, $d requests traced and read by blkparse and btt; two exports watched apart"
