#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# rqreplay end to end:
#   - a malformed trace: exit 1, "FILE:LINE: reason" on stderr, nothing on
#     stdout (nothing replayed half-way);
#   - determinism: the four-scheduler comparison, as tables and as JSON,
#     twice, byte-identical; plots written;
#   - blktrace output: blkparse reads it (every I/O has its Q, D and C),
#     btt reads it (Q2C, D2C), and rqreplay reads it back as a trace;
#   - a million-I/O trace replays within a generous budget (60 s of CPU;
#     the actual times and rates are printed, not asserted tighter).
#
#   replay_cli.sh RQREPLAY
set -u
R=$1
tmp=$(mktemp -d /tmp/rq-replay-cli.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# a small mixed trace: two pids, reads and writes, some sequential
awk 'BEGIN { print "time_ns,pid,op,offset,bytes"; s = 7;
	for (i = 0; i < 400; i++) {
		s = (s * 1103515245 + 12345) % 2147483648; h = int(s / 65536);
		if (i % 2) printf "%d,%d,R,%d,4096\n", i * 200000, 100, i * 4096;
		else printf "%d,%d,%s,%d,%d\n", i * 200000, 200, (h % 3) ? "R" : "W",
			(h % 100000) * 8192, 4096 * (1 + h % 4);
	} }' > "$tmp/mix.csv"

# --- a malformed line fails the whole run, with its line number
printf 'time_ns,pid,op,offset,bytes\n0,1,R,0,4096\n10,1,R,4096\n' > "$tmp/bad.csv"
"$R" "$tmp/bad.csv" > "$tmp/out" 2> "$tmp/err"
rc=$?
[ "$rc" = 1 ] || fail "malformed trace: exit $rc, want 1"
grep -q "bad.csv:3: expected 5 fields" "$tmp/err" || fail "malformed trace: stderr: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "malformed trace: something was printed on stdout"
"$R" --sched none --depth 0 "$tmp/mix.csv" > /dev/null 2>&1
[ $? = 2 ] || fail "--depth 0 is not a usage error"

# --- determinism
for model in hdd-7200 nvme; do
	for i in 1 2; do
		"$R" --model "$model" --sched mq-deadline,kyber,bfq,none "$tmp/mix.csv" \
			> "$tmp/table-$model.$i" 2> "$tmp/err" || fail "$model run $i: $(cat "$tmp/err")"
		"$R" --model "$model" --sched mq-deadline,kyber,bfq,none --json "$tmp/mix.csv" \
			> "$tmp/json-$model.$i" 2> "$tmp/err" || fail "$model json $i: $(cat "$tmp/err")"
	done
	cmp -s "$tmp/table-$model.1" "$tmp/table-$model.2" || fail "$model: tables differ"
	cmp -s "$tmp/json-$model.1" "$tmp/json-$model.2" || fail "$model: JSON differs"
	grep -q '^comparison' "$tmp/table-$model.1" || fail "$model: no comparison table"
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1]));
assert [r["sched"] for r in d["runs"]] == ["mq-deadline", "kyber", "bfq", "none"], d
assert all(r["total"]["ios"] == 400 for r in d["runs"])' "$tmp/json-$model.1" \
		|| fail "$model: JSON content"
done
"$R" --model nvme --sched none,bfq --plot "$tmp/plot" "$tmp/mix.csv" > /dev/null 2>&1 \
	|| fail "--plot failed"
for f in replay.gp cdf-none.dat cdf-bfq.dat; do
	[ -s "$tmp/plot/$f" ] || fail "--plot: no $f"
done

# --- the single-queue front end repeats too
for i in 1 2; do
	"$R" --front sq --model hdd-7200 --closed --sched noop,deadline,cfq "$tmp/mix.csv" \
		> "$tmp/sq.$i" 2> "$tmp/err" || fail "sq run $i: $(cat "$tmp/err")"
done
cmp -s "$tmp/sq.1" "$tmp/sq.2" || fail "sq: tables differ"

# --- io groups from the command line: bfq divides a one-die drive 3:1
# between groups of weight 300 and 100 (tests/replay/test_replay.c works
# the numbers out: stream 1 ends at 48.4 ms, 300 reads: 6198.3 I/Os/s)
awk 'BEGIN { print "time_ns,pid,op,offset,bytes";
	for (i = 0; i < 300; i++) printf "0,1,R,%d,4096\n0,2,R,%.0f,4096\n", i * 16384,
		1073741824 + i * 16384 }' > "$tmp/two.csv"
"$R" --model nvme --set channels=1 --set dies_per_channel=1 --set read_us=100 \
	--set xfer_us=10 --set host_mbps=4096 --set overhead_us=10 --set queue_depth=1 \
	--sched bfq --attr nr_requests=256 --attr iosched/slice_idle=0 \
	--attr iosched/max_budget=64 --closed --depth 100 \
	--group 1=1:300 --group 2=2:100 "$tmp/two.csv" > "$tmp/groups" 2> "$tmp/err" \
	|| fail "groups: $(cat "$tmp/err")"
awk '$1 == "1" && $2 == 300 && $4 == "6198.3" { ok = 1 } END { exit !ok }' "$tmp/groups" \
	|| fail "groups: stream 1 not at 6198.3 I/Os/s: $(cat "$tmp/groups")"

# --- blktrace output, read by blkparse and btt and by rqreplay itself
"$R" --model hdd-7200 --sched mq-deadline --blktrace "$tmp/sim" "$tmp/mix.csv" > /dev/null \
	|| fail "--blktrace run failed"
[ -s "$tmp/sim.blktrace.0" ] || fail "no sim.blktrace.0"
if command -v blkparse > /dev/null; then
	blkparse -i "$tmp/sim" -d "$tmp/sim.bin" > "$tmp/parsed" 2>&1 || fail "blkparse failed"
	q=$(awk '$6 == "Q"' "$tmp/parsed" | wc -l)
	c=$(awk '$6 == "C"' "$tmp/parsed" | wc -l)
	d=$(awk '$6 == "D"' "$tmp/parsed" | wc -l)
	[ "$q" = 400 ] || fail "blkparse: $q Q events, want 400"
	[ "$d" -ge 1 ] && [ "$d" -le 400 ] || fail "blkparse: $d D events"
	[ "$c" = "$d" ] || fail "blkparse: $c C events for $d D events"
	if command -v btt > /dev/null; then
		# btt writes its per-device .dat files into the working directory
		(cd "$tmp" && btt -i sim.bin > btt 2>&1) || fail "btt failed: $(head -5 "$tmp/btt")"
		grep -q '^Q2C' "$tmp/btt" || fail "btt: no Q2C line"
		grep -q '^D2C' "$tmp/btt" || fail "btt: no D2C line"
	fi
	# blkparse's text of the simulated run is itself a trace
	"$R" --format blkparse --model hdd-7200 --sched mq-deadline --json "$tmp/parsed" \
		> "$tmp/again.json" 2> "$tmp/err" || fail "blkparse text replay: $(cat "$tmp/err")"
else
	echo "blkparse not installed: blkparse/btt checks skipped"
fi
"$R" --model hdd-7200 --sched mq-deadline --json "$tmp/sim.blktrace.0" > "$tmp/bin.json" \
	2> "$tmp/err" || fail "blktrace binary replay: $(cat "$tmp/err")"
grep -q '"total":{"key":"all","ios":400,' "$tmp/bin.json" || fail "blktrace replay: not 400 I/Os"

# --- a million I/Os within the budget
awk 'BEGIN { print "time_ns,pid,op,offset,bytes"; s = 12345;
	for (i = 0; i < 1000000; i++) {
		s = (s * 1103515245 + 12345) % 2147483648; h = int(s / 64);
		printf "%.0f,%d,%s,%.0f,4096\n", i * 20000, 1 + i % 4, (h % 10 < 7) ? "R" : "W",
			(h % 4194304) * 4096;
	} }' > "$tmp/1m.csv"
# The budget is on CPU time (user + system) when /usr/bin/time is there:
# the replay is one thread, and CPU time does not grow when the machine is
# shared; wall time is printed too.
t0=$(date +%s.%N)
if [ -x /usr/bin/time ]; then
	/usr/bin/time -f '%U %S' -o "$tmp/1m.time" "$R" --model nvme --sched none "$tmp/1m.csv" \
		> "$tmp/1m.out" 2>&1 || fail "1M replay: $(tail -3 "$tmp/1m.out")"
	cpu=$(awk '{ print $1 + $2 }' "$tmp/1m.time")
else
	"$R" --model nvme --sched none "$tmp/1m.csv" > "$tmp/1m.out" 2>&1 ||
		fail "1M replay: $(tail -3 "$tmp/1m.out")"
	cpu=
fi
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
rate() { awk -v s="$1" 'BEGIN { printf "%.0f", (s > 0 ? 1000000 / s : 0) }'; }
echo "1M I/Os (nvme, none, open loop): $secs s wall, $(rate "$secs") I/Os per second;" \
	"CPU ${cpu:-?} s${cpu:+, $(rate "$cpu") I/Os per CPU second}"
budget=${cpu:-$secs}
awk -v b="$budget" 'BEGIN { exit !(b < 60) }' || fail "1M I/Os took $budget s (budget 60 s)"
grep -q '^all  *1000000 ' "$tmp/1m.out" || fail "1M replay: not every I/O counted"

[ "$failed" = 0 ] && echo "all checks passed"
exit "$failed"
