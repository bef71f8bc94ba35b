#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Compare rqbench (librequest, multi-queue, none, inline null driver) with
# userspace peers on this machine, in one go:
#   qemu-img bench with qemu's null-co driver (qemu's own block layer),
#   fio with its null engine.
# Prints a markdown table: tool, config, IOPS, ratio vs qemu-img.
#
# usage: bench/peers.sh [--quick] [--build DIR] [--json FILE] [--csv FILE]
#   --quick      1-2 s per run instead of about 3 s
#   --build DIR  meson build directory holding bench/rqbench
#                (default: $RQBENCH, else the first of build, build-* that has it)
#   --json FILE, --csv FILE  where the table's rows go as JSON and CSV
#                (default: bench-results/peers.json and .csv in the build
#                directory)
# A progress line per run goes to stderr.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/results.sh
. "$here/results.sh"
results_init peers "$@"
quick=0
build=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1 ;;
	--build) build="$2"; shift ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift ;;
	-h|--help) sed -n '3,17p' "$0"; exit 0 ;;
	*) echo "peers.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

if [ $quick = 1 ]; then
	secs=1; qcount=1000000; fiotime=1
else
	secs=3; qcount=4000000; fiotime=3
fi

find_rqbench() {
	if [ -n "${RQBENCH:-}" ]; then echo "$RQBENCH"; return; fi
	if [ -n "$build" ]; then echo "$build/bench/rqbench"; return; fi
	for d in "$top"/build "$top"/build-*; do
		if [ -x "$d/bench/rqbench" ]; then echo "$d/bench/rqbench"; return; fi
	done
	echo ""
}

# json_get FILE EXPR: read one number from a JSON document (jq, else python3)
json_get() {
	if command -v jq >/dev/null 2>&1; then
		jq -r "$2" <"$1"
	else
		python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].lstrip(".").split("."):
    d=d[int(k.strip("[]"))] if k.startswith("[") else d[k]
print(d)' "$1" "$(echo "$2" | sed 's/\[\([0-9]*\)\]/.[\1]/g')"
	fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$results_rows"' EXIT
progress_total 5

rows=()      # "tool|config|iops"
qemu_iops=""

add_row() { rows+=("$1|$2|$3"); }

# --- rqbench
rqbench=$(find_rqbench)
[ -n "$rqbench" ] && results_in "$(dirname "$(dirname "$rqbench")")"
if [ -z "$rqbench" ] || [ ! -x "$rqbench" ]; then
	add_row rqbench "mq/none null inline" "skipped: not built"
	progress "rqbench: skipped, not built"
	progress_n=$((progress_n + 2))
else
	for spec in "1|" "2|" "1|--no-lat"; do
		thr=${spec%%|*}; extra=${spec#*|}
		cfg="mq/none null inline, $thr thr, 4k randread, depth 32 batch 32${extra:+, $extra}"
		progress "rqbench $cfg, ${secs}s"
		if "$rqbench" --front mq --sched none --driver null --completion inline \
			--threads "$thr" --bs 4096 --pattern randread --depth 32 --batch 32 \
			--seconds "$secs" $extra --json >"$tmp/rq.json" 2>"$tmp/rq.err"; then
			add_row rqbench "$cfg" "$(json_get "$tmp/rq.json" .iops)"
		else
			add_row rqbench "$cfg" "failed: $(head -c 200 "$tmp/rq.err" | tr '\n|' '  ')"
		fi
	done
fi

# --- qemu-img bench, null-co
if ! command -v qemu-img >/dev/null 2>&1; then
	add_row qemu-img "null-co" "skipped: not installed"
	progress "qemu-img: skipped, not installed"
else
	cfg="bench null-co, 4k, depth 32, $qcount reqs"
	progress "qemu-img $cfg"
	if qemu-img bench -c "$qcount" -d 32 -s 4k \
		--image-opts driver=null-co,size=1073741824 >"$tmp/q.out" 2>&1; then
		t=$(sed -n 's/.*Run completed in \([0-9.]*\) seconds.*/\1/p' "$tmp/q.out")
		if [ -n "$t" ]; then
			qemu_iops=$(awk -v c="$qcount" -v t="$t" 'BEGIN { printf "%.0f", c / t }')
			add_row qemu-img "$cfg" "$qemu_iops"
		else
			add_row qemu-img "$cfg" "failed: no timing in output"
		fi
	else
		add_row qemu-img "$cfg" "failed: $(head -c 200 "$tmp/q.out" | tr '\n|' '  ')"
	fi
fi

# --- fio, null engine
if ! command -v fio >/dev/null 2>&1; then
	add_row fio "null engine" "skipped: not installed"
	progress "fio: skipped, not installed"
else
	cfg="ioengine=null, 4k randread, iodepth 32, ${fiotime}s"
	progress "fio $cfg"
	if fio --name=null --ioengine=null --rw=randread --bs=4k --size=1g \
		--iodepth=32 --time_based --runtime="$fiotime" \
		--output-format=json >"$tmp/f.json" 2>"$tmp/f.err"; then
		add_row fio "$cfg" "$(json_get "$tmp/f.json" '.jobs[0].read.iops' | awk '{ printf "%.0f", $1 }')"
	else
		add_row fio "$cfg" "failed: $(head -c 200 "$tmp/f.err" | tr '\n|' '  ')"
	fi
fi

echo "| tool | config | IOPS | ratio vs qemu-img |"
echo "|---|---|---:|---:|"
for r in "${rows[@]}"; do
	tool=${r%%|*}; rest=${r#*|}; cfg=${rest%%|*}; iops=${rest#*|}
	ratio="-"
	if [[ "$iops" =~ ^[0-9.]+$ ]]; then
		if [ -n "$qemu_iops" ]; then
			ratio=$(awk -v a="$iops" -v b="$qemu_iops" 'BEGIN { printf "%.2fx", a / b }')
		fi
		iops=$(awk -v a="$iops" 'BEGIN { printf "%.0f", a }')
		results_row tool="$tool" config="$cfg" iops="$iops" \
			ratio_vs_qemu_img="$( [ "$ratio" = - ] || echo "${ratio%x}")" note=
	else
		results_row tool="$tool" config="$cfg" iops= ratio_vs_qemu_img= note="$iops"
	fi
	echo "| $tool | $cfg | $iops | $ratio |"
done
results_write
