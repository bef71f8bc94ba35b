#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The multi-queue schedulers side by side: rqbench (null driver, inline
# completion, 4 KiB, depth 32, batch 32) with none, mq-deadline, kyber and
# bfq, 1 and 2 threads, randread and randwrite.  Every combination runs
# once per round and the rounds are interleaved, so a machine whose speed
# drifts drifts for all of them alike.  Prints a markdown table of the
# median M IOPS per cell, with the rounds' values in brackets.
#
# With --against DIR, instead: randread with 1 and 2 threads per scheduler
# and sq:noop (the single-queue front end), the build in DIR (another
# checkout's meson build directory) against this one, interleaved, as
# "before | after" medians.
#
# usage: bench/sched-table.sh [--rounds N] [--seconds S] [--threads LIST] [--build DIR] [--against DIR]
#   --rounds N     rounds (default 3)
#   --threads LIST submitting thread counts, e.g. "1 2 4" (default "1 2";
#                  not with --against); bench/plot.sh sched-threads draws
#                  IOPS against threads from the JSON
#   --seconds S    seconds per run (default 2)
#   --build DIR    meson build directory holding bench/rqbench (default: build)
#   --against DIR  compare with DIR/bench/rqbench
#   --json FILE, --csv FILE  where the table's cells go as JSON and CSV, one
#                  row per cell with the median and every round's value
#                  (default: bench-results/sched-table.json and .csv in
#                  the build directory)
#   --plot FILE    also draw IOPS against threads (bench/plot.py
#                  sched-threads) into FILE (.png or .svg)
# A progress line per run goes to stderr.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/results.sh
. "$here/results.sh"
results_init sched-table "$@"
rounds=3
plot=""
seconds=2
build="$top/build"
against=""
threads="1 2"
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds="$2"; shift ;;
	--seconds) seconds="$2"; shift ;;
	--build) build="$2"; shift ;;
	--against) against="$2"; shift ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift ;;
	--plot) plot="${2:-}"; [ -n "$plot" ] || { echo "sched-table.sh: --plot needs a file name" >&2; exit 2; }; shift ;;
	--threads) threads="$2"; shift ;;
	-h|--help) sed -n '3,29p' "$0"; exit 0 ;;
	*) echo "sched-table.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

scheds="none mq-deadline kyber bfq"

# one run: M IOPS; a scheduler named sq:NAME runs on the single-queue front end
run() { # rqbench sched threads pattern
	local front=mq sched=$2

	case "$sched" in sq:*) front=sq sched=${sched#sq:} ;; esac
	"$1" --front "$front" --sched "$sched" --threads "$3" --batch 32 \
		--seconds "$seconds" --pattern "$4" |
		grep -o '[0-9.]* M IOPS' | cut -d' ' -f1
}

# median of the values on stdin, and all of them
summarise() {
	sort -n | awk '{v[NR] = $1} END {
		printf "%.2f (", v[int((NR + 1) / 2)];
		for (i = 1; i <= NR; i++) printf "%s%s", v[i], i < NR ? " " : ")";
	}'
}

# the median of the values in FILE, and the values in run order
median_of() { sort -n "$1" | awk '{v[NR] = $1} END { print v[int((NR + 1) / 2)] }'; }
rounds_of() { tr '\n' ' ' <"$1" | sed 's/ $//'; }

for t in $threads; do
	case "$t" in
	'' | *[!0-9]* | 0) echo "sched-table.sh: --threads: '$t' is not a thread count" >&2; exit 2 ;;
	esac
done
for exe in "$build/bench/rqbench" ${against:+"$against/bench/rqbench"}; do
	[ -x "$exe" ] || { echo "sched-table.sh: no $exe (build first)" >&2; exit 1; }
done
results_in "$build"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$results_rows"' EXIT
progress_total $((rounds * $(wc -w <<<"$scheds") * $(wc -w <<<"$threads") * 2))

if [ -n "$against" ]; then
	scheds="$scheds sq:noop" # the single-queue front end's contrast, too
	progress_total $((rounds * $(wc -w <<<"$scheds") * 4))
	for r in $(seq "$rounds"); do
		for s in $scheds; do
			for t in 1 2; do
				progress "round $r: $s, $t thread(s), randread, before ($against)"
				run "$against/bench/rqbench" "$s" "$t" randread >>"$tmp/before.$s.$t"
				progress "round $r: $s, $t thread(s), randread, after ($build)"
				run "$build/bench/rqbench" "$s" "$t" randread >>"$tmp/after.$s.$t"
			done
		done
	done
	echo "| scheduler | 1 thread before | after | 2 threads before | after |"
	echo "|---|---:|---:|---:|---:|"
	for s in $scheds; do
		row="| $s"
		for t in 1 2; do
			row="$row | $(summarise <"$tmp/before.$s.$t") | $(summarise <"$tmp/after.$s.$t")"
			results_row scheduler="$s" threads="$t" pattern=randread \
				before_miops="$(median_of "$tmp/before.$s.$t")" \
				before_rounds="$(rounds_of "$tmp/before.$s.$t")" \
				after_miops="$(median_of "$tmp/after.$s.$t")" \
				after_rounds="$(rounds_of "$tmp/after.$s.$t")"
		done
		echo "$row |"
	done
	results_write
	exit 0
fi

for r in $(seq "$rounds"); do
	for s in $scheds; do
		for t in $threads; do
			for p in randread randwrite; do
				progress "round $r: $s, $t thread(s), $p"
				run "$build/bench/rqbench" "$s" "$t" "$p" >>"$tmp/$s.$t.$p"
			done
		done
	done
done
head="| scheduler" rule="|---"
for t in $threads; do
	for p in randread randwrite; do
		head="$head | $t thread(s) $p" rule="$rule|---:"
	done
done
echo "$head |"
echo "$rule|"
for s in $scheds; do
	row="| $s"
	for t in $threads; do
		for p in randread randwrite; do
			row="$row | $(summarise <"$tmp/$s.$t.$p")"
			results_row scheduler="$s" threads="$t" pattern="$p" \
				miops="$(median_of "$tmp/$s.$t.$p")" rounds="$(rounds_of "$tmp/$s.$t.$p")"
		done
	done
	echo "$row |"
done
results_write
if [ -n "$plot" ]; then
	"$here/plot.py" sched-threads "$results_json" "$plot" || exit 1
	echo "sched-table: plot in $plot" >&2
fi
