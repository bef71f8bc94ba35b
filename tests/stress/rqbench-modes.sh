#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# rqbench in each of its submission and completion modes (the loops and
# end_io it chooses once per phase: plain or sampled latencies, preallocated
# or rq_bio_alloc bios, uniform or other patterns; inline, thread and timer
# completion, rq_affinity 2, the single-queue front end, a scheduler):
#   - every run exits 0 within 120 s (a lost completion hangs it);
#   - "ops" is exactly --ops: every bio of the measured phase was reaped
#     once, and none of the warm-up's;
#   - "errors" is 0 and "requests" is at least 1 and at most "ops";
#   - "lat_samples" is ops without --no-lat, ops / N with --lat-sample N,
#     0 with --no-lat.
# With "floor": instead, rqbench's floor schedulers (bench/floorsched.c:
# floor-min, floor-hooks) over one and two hw queues and threads, inline
# and thread completion, reads, writes (limit_depth's async path) and
# sequential writes (bio_merge finding queued requests), the same checks
# and "allocs" 0 (nothing allocated per I/O; null without jemalloc): real
# schedulers, every request dispatched once.  Fails on a rqbench without
# them (unknown scheduler).
# Skipped (77) without python3.
#
#   rqbench-modes.sh RQBENCH [floor]
set -u
rqbench=$1
set=${2:-modes}
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/rq-rqbench-modes.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
ops=3000

# check SAMPLES ARGS...: one run, its JSON checked; SAMPLES is the expected
# lat_samples
check() {
	samples=$1
	shift
	if ! timeout 120 "$rqbench" --ops $ops --warmup 300 --json "$@" >"$tmp/out.json" 2>"$tmp/err"; then
		echo "FAIL: rqbench $* (exit or timeout):"
		cat "$tmp/err"
		failed=1
		return
	fi
	python3 - "$tmp/out.json" $ops "$samples" "$set" <<'PY' || { echo "FAIL: rqbench $*"; failed=1; }
import json, sys
d = json.load(open(sys.argv[1]))
ops, samples = int(sys.argv[2]), int(sys.argv[3])
bad = []
if sys.argv[4] == "floor" and d["allocs"] is not None and d["allocs"] != 0:
    bad.append("allocs %d" % d["allocs"])
if d["ops"] != ops:
    bad.append("ops %d, not %d" % (d["ops"], ops))
if d["errors"] != 0:
    bad.append("errors %d" % d["errors"])
if not 1 <= d["requests"] <= ops:
    bad.append("requests %d" % d["requests"])
if d["lat_samples"] != samples:
    bad.append("lat_samples %d, not %d" % (d["lat_samples"], samples))
if bad:
    print("  " + "; ".join(bad))
    sys.exit(1)
PY
	echo "ok: rqbench $*"
}

if [ "$set" = floor ]; then
	for s in floor-min floor-hooks; do
		check 0 --sched $s --threads 1 --hw-queues 1 --no-lat --batch 32
		check 0 --sched $s --threads 2 --hw-queues 2 --no-lat --batch 32
		check $ops --sched $s --threads 2 --hw-queues 1 --batch 8
		check 0 --sched $s --threads 2 --hw-queues 2 --no-lat --completion thread
		check 0 --sched $s --threads 1 --hw-queues 1 --no-lat --pattern randrw
		check 0 --sched $s --threads 2 --hw-queues 1 --no-lat --pattern write --batch 16
	done
	exit $failed
fi

check $ops --threads 1 --hw-queues 1
check 0 --threads 1 --no-lat --batch 32
check 0 --threads 2 --no-lat --batch 8
check $((ops / 7)) --threads 1 --lat-sample 7 --batch 4
check 0 --threads 2 --bio-alloc --no-lat
check $ops --threads 1 --bio-alloc --completion thread
check 0 --threads 2 --no-lat --completion thread --batch 16
check $ops --threads 2 --completion thread
check 0 --threads 2 --no-lat --completion thread --depth 100 --batch 16
check $ops --threads 1 --completion thread --depth 130 --pin-split --cpu-busy
check 0 --threads 1 --no-lat --completion timer --completion-nsec 2000
check 0 --threads 2 --no-lat --pattern read --batch 32
check 0 --threads 1 --no-lat --pattern randrw
check $ops --threads 1 --pattern write --memory-backed
check 0 --threads 2 --no-lat --rq-affinity 2 --completion thread
check $ops --threads 2 --rq-affinity 2 --completion thread
check 0 --threads 1 --no-lat --rq-affinity 2
check 0 --front sq --threads 2 --no-lat --batch 8
check $ops --front sq --threads 1 --completion thread
check 0 --sched mq-deadline --threads 2 --no-lat --batch 32
check $ops --sched kyber --threads 2 --completion thread
exit $failed
