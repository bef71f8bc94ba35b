#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# rqbench's floor schedulers (bench/floorsched.c: floor-min, floor-hooks) are
# real schedulers: over one and two hw queues, one and two threads, inline
# and thread completion, reads, writes (limit_depth's async path) and
# sequential writes (bio_merge finding queued requests):
#   - every run exits 0 within 120 s (a request never dispatched hangs it);
#   - "ops" is exactly --ops and "errors" is 0 (every bio completed once);
#   - "allocs" is 0: nothing is allocated per I/O (when jemalloc counts;
#     null without it).
# Fails on a rqbench without them (unknown scheduler).  Skipped (77)
# without python3.
#
#   rqbench-floor.sh RQBENCH
set -u
rqbench=$1
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/rq-rqbench-floor.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
ops=20000

check() {
	if ! timeout 120 "$rqbench" --ops $ops --warmup 300 --json "$@" >"$tmp/out.json" 2>"$tmp/err"; then
		echo "FAIL: rqbench $* (exit or timeout):"
		cat "$tmp/err"
		failed=1
		return
	fi
	python3 - "$tmp/out.json" $ops <<'PY' || { echo "FAIL: rqbench $*"; failed=1; }
import json, sys
d = json.load(open(sys.argv[1]))
ops = int(sys.argv[2])
bad = []
if d["ops"] != ops:
    bad.append("ops %d, not %d" % (d["ops"], ops))
if d["errors"] != 0:
    bad.append("errors %d" % d["errors"])
if not 1 <= d["requests"] <= ops:
    bad.append("requests %d" % d["requests"])
if d["allocs"] is not None and d["allocs"] != 0:
    bad.append("allocs %d" % d["allocs"])
if bad:
    print("  " + "; ".join(bad))
    sys.exit(1)
PY
	echo "ok: rqbench $*"
}

for s in floor-min floor-hooks; do
	check --sched $s --threads 1 --hw-queues 1 --no-lat --batch 32
	check --sched $s --threads 2 --hw-queues 2 --no-lat --batch 32
	check --sched $s --threads 2 --hw-queues 1 --batch 8
	check --sched $s --threads 2 --hw-queues 2 --no-lat --completion thread
	check --sched $s --threads 1 --hw-queues 1 --no-lat --pattern randrw
	check --sched $s --threads 2 --hw-queues 1 --no-lat --pattern write --batch 16
done
exit $failed
