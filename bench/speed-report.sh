#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The speed report of issue 16: every configuration that matters, side by
# side in one run, as ratios measured in the same minute.  rqbench (null
# driver, 4 KiB randread, depth 32, batch 32) runs the empty request life
# (--empty: an atomic tag get and put on a bitmap, an indirect call, a
# callback), mq/none with inline completion and with the driver's
# completion thread, mq-deadline, kyber and bfq, and the single-queue
# front end with noop, deadline and cfq, each with 1 and 2 submitting
# threads, and rqbench's floor schedulers floor-min and floor-hooks (1
# thread; the scheduler contract's cost with no scheduling, as a ratio
# to none without a target: doc/benchmarks.md); then qemu-img bench (null-co) and fio (null engine).  Each
# round runs every configuration once, in the same order, so a machine
# whose speed drifts drifts for all of them alike; a cell is the median of
# the rounds.  Prints a markdown table of M IOPS with the ratios the issue
# asks for (share of the empty life, scheduler / none, 2-thread scaling,
# completion thread / inline, sq / mq), each target with PASS or FAIL.
#
# usage: bench/speed-report.sh [--quick | --smoke] [--rounds N] [--seconds S]
#                              [--build DIR] [--baseline DIR] [--lat]
#                              [--json FILE] [--csv FILE]
#   --rounds N      rounds (default 3; the median of N values per cell)
#   --seconds S     seconds per rqbench run (default 1)
#   --quick         0.3 s per rqbench run, 1 s per peer (still medians of
#                   --rounds, 3 by default): about half a minute
#   --smoke         a shape check, not a measurement: one round of 20000
#                   bios per run, tiny peer runs (the build test uses it)
#   --build DIR     meson build directory holding bench/rqbench
#                   (default: build, beside this script's folder)
#   --baseline DIR  also run DIR/bench/rqbench (an older build) in the same
#                   rounds, right after each run of this one, alternating
#                   which goes first: extra "before" columns and after/before
#   --lat           time every bio in rqbench (its default); without it the
#                   runs pass --no-lat, since two clock reads per bio are the
#                   benchmark's cost, not the request layer's, and the empty
#                   life reads no clock either
#   --json FILE, --csv FILE  where the rows go (default:
#                   bench-results/speed-report.json and .csv in the build
#                   directory), one row per configuration with its median,
#                   every round's value, the ratio, the target and the result
# A progress line per run goes to stderr.  Exit 0 whatever the targets say
# (it is a report); 1 if a run failed; 2 on bad usage.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/results.sh
. "$here/results.sh"
results_init speed-report "$@"

usage_error() { echo "speed-report.sh: $*" >&2; exit 2; }
need_arg() { case "${2:-}" in "" | --*) usage_error "$1 needs a value" ;; esac; }

rounds=3
seconds=1
peer_secs=2
mode=full
build="$top/build"
baseline=""
lat=0
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) need_arg "$@"; rounds=$2; shift ;;
	--seconds) need_arg "$@"; seconds=$2; shift ;;
	--quick) mode=quick ;;
	--smoke) mode=smoke ;;
	--build) need_arg "$@"; build=$2; shift ;;
	--baseline) need_arg "$@"; baseline=$2; shift ;;
	--lat) lat=1 ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift ;;
	-h|--help) sed -n '3,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//; s/^#$//'; exit 0 ;;
	*) usage_error "unknown argument $1" ;;
	esac
	shift
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || usage_error "--rounds: '$rounds' is not a positive integer"
[[ "$seconds" =~ ^[0-9]*\.?[0-9]+$ ]] || usage_error "--seconds: '$seconds' is not a number"
case $mode in
quick) seconds=0.3; peer_secs=1 ;;
smoke) rounds=1 ;;
esac
rqbench="$build/bench/rqbench"
[ -x "$rqbench" ] || usage_error "no $rqbench (build first, or give --build DIR)"
if [ -n "$baseline" ]; then
	base_rqbench="$baseline/bench/rqbench"
	[ -x "$base_rqbench" ] || usage_error "--baseline: no $base_rqbench"
	# rqbench's floor schedulers (doc/benchmarks.md) are newer than some baselines
	base_floor=0
	"$base_rqbench" --sched floor-min --threads 1 --ops 1 --warmup 0 >/dev/null 2>&1 && base_floor=1
fi
results_in "$build"

# how long one rqbench run lasts
if [ $mode = smoke ]; then
	run_len=(--ops 20000 --warmup 1000)
else
	run_len=(--seconds "$seconds")
fi
lat_args=(--no-lat)
[ $lat = 1 ] && lat_args=()

tmp=$(mktemp -d /tmp/speed-report.XXXXXX) || exit 1
trap 'rm -rf "$tmp" "$results_rows"' EXIT
failed=0

# ------------------------------------------------------------ configurations

# id|label|rqbench arguments (after the common ones)
configs=(
	"empty1|empty request life, 1 thread|--empty --threads 1"
	"empty2|empty request life, 2 threads|--empty --threads 2"
	"none1|mq/none, inline completion, 1 thread|--sched none --threads 1"
	"none2|mq/none, inline, 2 threads|--sched none --threads 2"
	"ct1|mq/none, completion thread, 1 submitting thread|--sched none --completion thread --threads 1"
	"ct2|mq/none, completion thread, 2 submitting threads|--sched none --completion thread --threads 2"
	"mqdl1|mq-deadline, 1 thread|--sched mq-deadline --threads 1"
	"mqdl2|mq-deadline, 2 threads|--sched mq-deadline --threads 2"
	"kyber1|kyber, 1 thread|--sched kyber --threads 1"
	"kyber2|kyber, 2 threads|--sched kyber --threads 2"
	"floormin1|floor-min, 1 thread|--sched floor-min --threads 1"
	"floorhooks1|floor-hooks, 1 thread|--sched floor-hooks --threads 1"
	"bfq1|bfq, 1 thread|--sched bfq --threads 1"
	"bfq2|bfq, 2 threads|--sched bfq --threads 2"
	"sqnoop1|sq/noop, 1 thread|--front sq --sched noop --threads 1"
	"sqnoop2|sq/noop, 2 threads|--front sq --sched noop --threads 2"
	"sqdl1|sq/deadline, 1 thread|--front sq --sched deadline --threads 1"
	"sqdl2|sq/deadline, 2 threads|--front sq --sched deadline --threads 2"
	"sqcfq1|sq/cfq, 1 thread|--front sq --sched cfq --threads 1"
	"sqcfq2|sq/cfq, 2 threads|--front sq --sched cfq --threads 2"
)
peers=(
	"qemu|qemu-img bench, null-co"
	"fio|fio, null engine"
)

# the table's rows, in order: id|numerator|denominator|what the ratio is|target
# (none: no target); "ID:scale" is a second row for configuration ID
ratios=(
	"empty1|empty1|empty1|the floor|"
	"empty2|empty2|empty1|2-thread scaling of the floor|"
	"none1|none1|empty1|share of the empty life (1 thread)|0.35"
	"none2|none2|empty2|share of the empty life (2 threads)|"
	"none2:scale|none2|none1|2-thread scaling of mq/none|1.7"
	"ct1|ct1|none1|completion thread / inline (1 thread)|0.5"
	"ct2|ct2|none2|completion thread / inline (2 threads)|"
	"mqdl1|mqdl1|none1|mq-deadline / none|0.75"
	"mqdl2|mqdl2|mqdl1|2-thread scaling|1.7"
	"kyber1|kyber1|none1|kyber / none|0.9"
	"kyber2|kyber2|kyber1|2-thread scaling|1.7"
	"floormin1|floormin1|none1|floor / none: required hooks only|"
	"floorhooks1|floorhooks1|none1|floor / none: every hook kyber has|"
	"bfq1|bfq1|none1|bfq / none|0.5"
	"bfq2|bfq2|bfq1|2-thread scaling|1.7"
	"sqnoop1|sqnoop1|none1|sq / mq (1 thread)|0.8"
	"sqnoop2|sqnoop2|none2|sq / mq (2 threads)|"
	"sqdl1|sqdl1|sqnoop1|sq deadline / sq noop|"
	"sqdl2|sqdl2|sqdl1|2-thread scaling|"
	"sqcfq1|sqcfq1|sqnoop1|sq cfq / sq noop|"
	"sqcfq2|sqcfq2|sqcfq1|2-thread scaling|"
	"qemu|qemu|none1|peer / mq/none 1 thread|"
	"fio|fio|none1|peer / mq/none 1 thread|"
)

# ------------------------------------------------------------------- runners

# json_num FILE KEY: a top-level number of a JSON object
json_num() {
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2" \
		2>/dev/null
}

# run_rqbench BINARY ARGS...: print IOPS, or nothing on failure
run_rqbench() {
	local bin=$1
	shift
	if "$bin" --driver null --bs 4096 --pattern randread --depth 32 --batch 32 \
		"${lat_args[@]}" "${run_len[@]}" "$@" --json >"$tmp/rq.json" 2>"$tmp/rq.err"; then
		json_num "$tmp/rq.json" iops
	else
		echo "speed-report.sh: $bin $*: $(head -c 300 "$tmp/rq.err")" >&2
	fi
}

# qemu-img bench with the null-co driver: its request count over its run time
run_qemu() {
	local count t
	command -v qemu-img >/dev/null 2>&1 || return 0
	case $mode in smoke) count=20000 ;; quick) count=1000000 ;; *) count=$((peer_secs * 1500000)) ;; esac
	qemu-img bench -c "$count" -d 32 -s 4k --image-opts driver=null-co,size=1073741824 \
		>"$tmp/q.out" 2>&1 || { echo "speed-report.sh: qemu-img failed" >&2; return 0; }
	t=$(sed -n 's/.*Run completed in \([0-9.]*\) seconds.*/\1/p' "$tmp/q.out")
	[ -n "$t" ] && awk -v c="$count" -v t="$t" 'BEGIN { if (t > 0) printf "%.0f\n", c / t }'
}

# fio's null engine: one job, 4 KiB randread, iodepth 32
run_fio() {
	local len
	command -v fio >/dev/null 2>&1 || return 0
	if [ $mode = smoke ]; then
		len=(--size=64m)
	else
		len=(--size=1g --time_based --runtime="$peer_secs")
	fi
	fio --name=null --ioengine=null --rw=randread --bs=4k --iodepth=32 "${len[@]}" \
		--output-format=json >"$tmp/f.json" 2>"$tmp/f.err" ||
		{ echo "speed-report.sh: fio failed" >&2; return 0; }
	python3 -c 'import json, sys; print("%.0f" % json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"])' \
		"$tmp/f.json" 2>/dev/null
}

# ------------------------------------------------------------------ measure

declare -A vals base_vals label
for c in "${configs[@]}" "${peers[@]}"; do
	IFS='|' read -r id lab _ <<<"$c"
	label[$id]=$lab
	vals[$id]=""
	base_vals[$id]=""
done

runs_per_config=1
[ -n "$baseline" ] && runs_per_config=2
per_round=$((${#configs[@]} * runs_per_config + ${#peers[@]}))
progress_total $((rounds * per_round))
for ((r = 1; r <= rounds; r++)); do
	for c in "${configs[@]}"; do
		IFS='|' read -r id lab args <<<"$c"
		# shellcheck disable=SC2206
		argv=($args)
		order="new base"
		[ $((r % 2)) = 0 ] && order="base new"
		for which in $order; do
			if [ "$which" = base ]; then
				[ -n "$baseline" ] || continue
				[ "$base_floor" = 0 ] && [[ $id == floor* ]] && continue
				progress "round $r: $lab (baseline)"
				v=$(run_rqbench "$base_rqbench" "${argv[@]}")
				base_vals[$id]="${base_vals[$id]} ${v:-nan}"
			else
				progress "round $r: $lab"
				v=$(run_rqbench "$rqbench" "${argv[@]}")
				[ -n "$v" ] || failed=1
				vals[$id]="${vals[$id]} ${v:-nan}"
			fi
		done
	done
	progress "round $r: ${label[qemu]}"
	v=$(run_qemu)
	vals[qemu]="${vals[qemu]} ${v:-nan}"
	progress "round $r: ${label[fio]}"
	v=$(run_fio)
	vals[fio]="${vals[fio]} ${v:-nan}"
done

# median IOPS of a list of values ("nan" for failed runs: left out); empty if none
median() {
	tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+$' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) printf "%.0f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

miops() { [ -n "$1" ] && awk -v v="$1" 'BEGIN { printf "%.2f", v / 1e6 }' || echo "-"; }
# rounds as M IOPS, space-separated
rounds_m() {
	local out="" x
	for x in $1; do
		if [[ "$x" =~ ^[0-9.]+$ ]]; then out="$out $(miops "$x")"; else out="$out -"; fi
	done
	echo "${out# }"
}
div() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b }'; }

declare -A med base_med
for id in "${!vals[@]}"; do
	med[$id]=$(median "${vals[$id]}")
	base_med[$id]=$(median "${base_vals[$id]}")
done

# ------------------------------------------------------------------- report

hdr="| configuration | M IOPS | rounds | ratio | of what | target | result |"
sep="|---|---:|---|---:|---|---:|---|"
if [ -n "$baseline" ]; then
	hdr="$hdr before M IOPS | after / before |"
	sep="$sep---:|---:|"
fi
echo "Speed report, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);"
echo "rqbench: null driver, 4 KiB randread, depth 32, batch 32$([ $lat = 1 ] || echo ", --no-lat"); median of $rounds round(s)."
echo
echo "$hdr"
echo "$sep"
met=0
targets=0
for rr in "${ratios[@]}"; do
	IFS='|' read -r rid num den what target <<<"$rr"
	id=${rid%%:*}
	ratio=$(div "${med[$num]}" "${med[$den]}")
	result="-"
	if [ -n "$target" ]; then
		targets=$((targets + 1))
		if [ -z "$ratio" ]; then
			result=FAIL
		elif awk -v r="$ratio" -v t="$target" 'BEGIN { exit !(r >= t) }'; then
			result=PASS
			met=$((met + 1))
		else
			result=FAIL
		fi
	fi
	name=${label[$id]}
	[ "$rid" != "$id" ] && name="$name (scaling)"
	line="| $name | $(miops "${med[$id]}") | $(rounds_m "${vals[$id]}") | ${ratio:--} | $what | ${target:+>= $target} | $result |"
	after_before=""
	if [ -n "$baseline" ]; then
		after_before=$(div "${med[$id]}" "${base_med[$id]}")
		line="$line $(miops "${base_med[$id]}") | ${after_before:--} |"
	fi
	echo "$line"
	results_row id="$rid" config="$name" iops="${med[$id]}" \
		iops_rounds="$(tr ' ' '\n' <<<"${vals[$id]}" | grep -E '^[0-9.]+$' | tr '\n' ' ')" \
		ratio="$ratio" ratio_of="$what" target="$target" result="$result" \
		base_iops="${base_med[$id]}" \
		base_iops_rounds="$(tr ' ' '\n' <<<"${base_vals[$id]}" | grep -E '^[0-9.]+$' | tr '\n' ' ')" \
		after_before="$after_before"
done
echo
echo "Targets met: $met of $targets."
results_write
exit $failed
