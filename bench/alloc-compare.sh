#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The library's heap, before and after (doc/allocation.md): two builds of
# librequest compared in the same run, interleaved round by round.
#   - rqbench (which links jemalloc itself) on the I/O path: mq/none at 1
#     and 2 threads, mq/mq-deadline, sq/noop;
#   - qsetup (bench/qsetup.c, compiled here against each build's library)
#     for queue set-up and teardown, 4 hw queues x 1024 tags, run as an
#     embedder (no jemalloc of its own) and under LD_PRELOAD of jemalloc.
#
# usage: bench/alloc-compare.sh BEFORE_BUILD AFTER_BUILD [--rounds N]
#        [--seconds S] [--csv FILE]
#   a BUILD is a configured and built meson build directory (bench/rqbench
#   and lib/librequest.so in it; include/ one level up).  A progress line
#   per run on stderr; every run's numbers go to FILE (default
#   AFTER_BUILD/bench-results/alloc-compare.csv); the table (medians over
#   the rounds) on stdout.
set -euo pipefail

usage() { echo "usage: $0 BEFORE_BUILD AFTER_BUILD [--rounds N] [--seconds S] [--csv FILE]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
before=$(realpath "$1")
after=$(realpath "$2")
shift 2
rounds=3
secs=2
csv=$after/bench-results/alloc-compare.csv
while [[ $# -gt 0 ]]; do
	case $1 in
	--rounds) rounds=${2:?}; shift 2 ;;
	--seconds) secs=${2:?}; shift 2 ;;
	--csv) csv=${2:?}; shift 2 ;;
	*) usage ;;
	esac
done
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jemalloc_so=$(ldd "$after/lib/librequest.so" | awk '/libjemalloc/ {print $3}')

# qsetup against each build's library
for b in before after; do
	dir=${!b}
	cc -O2 "$src/qsetup.c" -o "$tmp/qsetup-$b" -I"$dir/../include" -I"$dir/include" \
		-L"$dir/lib" -lrequest -Wl,-rpath,"$dir/lib" -ldl
done

mkdir -p "$(dirname "$csv")"
echo "bench,config,build,round,value,allocs" > "$csv"
io_configs=("--sched none --threads 1" "--sched none --threads 2"
	    "--sched mq-deadline --threads 1" "--front sq --sched noop --threads 1")
setup_configs=("embedder none" "embedder mq-deadline" "preload none" "preload mq-deadline")
for ((r = 1; r <= rounds; r++)); do
	for cfg in "${io_configs[@]}"; do
		for b in before after; do
			dir=${!b}
			echo "round $r/$rounds: rqbench $cfg ($b)" >&2
			# shellcheck disable=SC2086
			"$dir/bench/rqbench" $cfg --seconds "$secs" --json > "$tmp/out"
			python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print("rqbench,%s,%s,%s,%d,%s" % (sys.argv[2], sys.argv[3], sys.argv[4], j["iops"], j["allocs"]))
' "$tmp/out" "$cfg" "$b" "$r" >> "$csv"
		done
	done
	for cfg in "${setup_configs[@]}"; do
		mode=${cfg% *}
		sched=${cfg#* }
		for b in before after; do
			echo "round $r/$rounds: qsetup $cfg ($b)" >&2
			if [[ $mode == preload ]]; then
				LD_PRELOAD=$jemalloc_so "$tmp/qsetup-$b" --sched "$sched" > "$tmp/out"
			else
				"$tmp/qsetup-$b" --sched "$sched" > "$tmp/out"
			fi
			python3 -c '
import re, sys
t = open(sys.argv[1]).read()
us = float(re.search(r"round ([0-9.]+) us", t).group(1))
m = re.search(r"allocs/round ([0-9.]+)", t)
print("qsetup,%s,%s,%s,%.1f,%s" % (sys.argv[2], sys.argv[3], sys.argv[4], us,
      m.group(1) if m else ""))
' "$tmp/out" "$cfg" "$b" "$r" >> "$csv"
		done
	done
done

python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = []
for r in rows:
    k = (r["bench"], r["config"])
    if k not in keys:
        keys.append(k)
def med(bench, config, build, field):
    v = [float(r[field]) for r in rows
         if (r["bench"], r["config"], r["build"]) == (bench, config, build) and r[field] != ""]
    return statistics.median(v) if v else None
print("| bench | configuration | before | after | change | allocs before / after |")
print("|---|---|---|---|---|---|")
for bench, config in keys:
    b = med(bench, config, "before", "value")
    a = med(bench, config, "after", "value")
    ab = med(bench, config, "before", "allocs")
    aa = med(bench, config, "after", "allocs")
    unit = "IOPS" if bench == "rqbench" else "us/round"
    fmt = (lambda x: "%.2f M" % (x / 1e6)) if bench == "rqbench" else (lambda x: "%.0f" % x)
    al = "%s / %s" % ("-" if ab is None else "%g" % ab, "-" if aa is None else "%g" % aa)
    print("| %s (%s) | %s | %s | %s | %+.1f%% | %s |" % (bench, unit, config, fmt(b), fmt(a),
          100.0 * (a - b) / b, al))
PY
