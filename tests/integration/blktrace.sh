#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# blkparse and btt (Debian package blktrace) read the traces librequest
# writes.  rqbench --trace runs known workloads; blkparse parses every
# record (no "bad trace" or skipped records), and its count of each action
# equals the queue's own counters, which rqbench prints when the trace
# stops:
#   Q = bios - splits (a split's pieces are not queued again, as in the
#   kernel), X = splits, M + F = merges_back + merges_front + merges_rq,
#   G = requests, D = dispatched, C = completed, I = requests (with a
#   scheduler, every request is inserted), P = U (with a plug).
# With --trace-actions (blktrace's -a mask) only the categories asked for.
# Then btt, on blkparse's dump, prints Q2G, G2I, I2D, D2C and Q2C, D2C and
# Q2C with one sample per queued bio.
# Usage: blktrace.sh RQBENCH.  Skipped (77) without blkparse or btt.
set -eu

rqbench=$1
command -v blkparse >/dev/null 2>&1 || { echo "blkparse not found (package blktrace): skipped"; exit 77; }
command -v btt >/dev/null 2>&1 || { echo "btt not found (package blktrace): skipped"; exit 77; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0

# counter NAME: the queue counter NAME from rqbench's trace line
counter() {
	sed -n 's/.*; queue //p' "$dir/err" | tr ' ' '\n' | awk -v k="$1" 'p {print; exit} $0 == k {p = 1}'
}

# actions: "A N" per action letter of the trace
actions() {
	blkparse -q -D "$dir" -i rqbench -f '%a\n' > "$dir/acts" 2> "$dir/bperr"
	if grep -qiE 'bad|skip' "$dir/bperr"; then
		echo "FAIL: blkparse complained:"; cat "$dir/bperr"; fail=1
	fi
	grep -E '^[A-Za-z]{1,2}$' "$dir/acts" | sort | uniq -c | awk '{print $2, $1}' > "$dir/counts"
}

count() {
	awk -v a="$1" '$1 == a {print $2; f = 1} END {if (!f) print 0}' "$dir/counts"
}

expect() { # what got want
	if [ "$2" != "$3" ]; then
		echo "FAIL: $1: trace has $2, the queue counted $3"
		fail=1
	else
		echo "ok: $1 = $2"
	fi
}

# run NAME ARGS...: one traced rqbench run, its actions checked
run() {
	name=$1
	shift
	rm -f "$dir"/rqbench.blktrace.*
	"$rqbench" --ops 2000 --trace "$dir" "$@" > /dev/null 2> "$dir/err" ||
		{ echo "FAIL: rqbench $*:"; cat "$dir/err"; exit 1; }
	echo "== $name: rqbench $*"
	cat "$dir/err"
	grep -q ' 0 dropped' "$dir/err" || { echo "FAIL: events dropped"; fail=1; }
	actions
	bios=$(counter bios); splits=$(counter splits); requests=$(counter requests)
	merges=$(( $(counter merges_back) + $(counter merges_front) + $(counter merges_rq) ))
	expect "Q" "$(count Q)" "$((bios - splits))"
	expect "X" "$(count X)" "$splits"
	expect "M + F" "$(( $(count M) + $(count F) ))" "$merges"
	expect "G" "$(count G)" "$requests"
	expect "D" "$(count D)" "$(counter dispatched)"
	expect "C" "$(count C)" "$(counter completed)"
	expect "P = U" "$(count P)" "$(count U)"
}

# sequential writes plugged in 16s under mq-deadline: merges, inserts
run merges --sched mq-deadline --pattern write --batch 16
expect "I" "$(count I)" "$requests"
[ "$(count M)" -gt 0 ] || { echo "FAIL: no merge traced"; fail=1; }

# 8 KiB bios on 4 KiB requests: every bio split once
run splits --sched none --pattern write --bs 8192 --max-sectors-kb 4
[ "$splits" -gt 0 ] || { echo "FAIL: no split"; fail=1; }

# the single-queue front end: deadline, plugged sequential writes
run sq --front sq --sched deadline --pattern write --batch 8
expect "I" "$(count I)" "$requests"

# two threads, random reads, kyber
run threads --sched kyber --threads 2 --pattern randread --depth 8

# blktrace's -a mask (--trace-actions): issue and complete only, so D and C
# as counted, no Q, G; the mask does not change what the queue does
rm -f "$dir"/rqbench.blktrace.*
"$rqbench" --ops 2000 --trace "$dir" --trace-actions issue,complete --sched none \
	> /dev/null 2> "$dir/err" || { echo "FAIL: rqbench --trace-actions:"; cat "$dir/err"; exit 1; }
echo "== mask: rqbench --trace-actions issue,complete"
cat "$dir/err"
grep -q ' 0 dropped' "$dir/err" || { echo "FAIL: events dropped"; fail=1; }
actions
expect "D" "$(count D)" "$(counter dispatched)"
expect "C" "$(count C)" "$(counter completed)"
expect "Q (masked)" "$(count Q)" 0
expect "G (masked)" "$(count G)" 0
if "$rqbench" --ops 10 --trace "$dir" --trace-actions bogus > /dev/null 2>&1; then
	echo "FAIL: --trace-actions bogus accepted"
	fail=1
fi

# btt over the first workload
run btt --sched mq-deadline --pattern write --batch 4
blkparse -q -D "$dir" -i rqbench -d "$dir/rq.bin" > /dev/null
(cd "$dir" && btt -i rq.bin -o btt > /dev/null)
cat "$dir/btt.avg"
for m in Q2G G2I I2D D2C Q2C; do
	n=$(awk -v m="$m" '$1 == m {print $NF}' "$dir/btt.avg")
	if [ -z "$n" ] || [ "$n" -le 0 ]; then
		echo "FAIL: btt has no $m"
		fail=1
	fi
done
# btt follows each queued bio to its request's completion
for m in D2C Q2C; do
	n=$(awk -v m="$m" '$1 == m {print $NF}' "$dir/btt.avg")
	[ "$n" = "$((bios - splits))" ] ||
		{ echo "FAIL: btt $m has $n samples for $((bios - splits)) queued bios"; fail=1; }
done
exit $fail
