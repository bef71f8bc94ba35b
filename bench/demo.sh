#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The quick-start's main job (about 20-40 s): rqbench over every front end
# and scheduler the build offers, 1 and 2 threads, 4 KiB randread and
# randwrite, one second each; then the peers in quick mode.
#
# usage: bench/demo.sh [--build DIR] [--seconds S] [--json FILE] [--csv FILE]
#   a progress line per run on stderr; the rqbench table's rows also go to
#   bench-results/demo.json and .csv in the build directory (or FILE);
#   peers.sh writes its own
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/results.sh
. "$here/results.sh"
results_init demo "$@"
build=""
secs=1
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build="$2"; shift ;;
	--seconds) secs="$2"; shift ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift ;;
	-h|--help) sed -n '3,11p' "$0"; exit 0 ;;
	*) echo "demo.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

rqbench=${RQBENCH:-}
if [ -z "$rqbench" ] && [ -n "$build" ]; then
	rqbench="$build/bench/rqbench"
fi
if [ -z "$rqbench" ]; then
	for d in "$top"/build "$top"/build-*; do
		if [ -x "$d/bench/rqbench" ]; then rqbench="$d/bench/rqbench"; break; fi
	done
fi
if [ -z "$rqbench" ] || [ ! -x "$rqbench" ]; then
	echo "demo.sh: rqbench not found; build first: meson setup build && ninja -C build" >&2
	exit 1
fi
results_in "$(dirname "$(dirname "$rqbench")")"

# fields FILE KEY...: top-level or lat_ns numbers from rqbench's JSON line,
# on one line
fields() {
	python3 -c 'import json,sys
doc=json.load(open(sys.argv[1]))
out=[]
for key in sys.argv[2:]:
    d=doc
    for k in key.split("."):
        d=d[k]
    out.append(str(d) if d is not None else "-")
print(" ".join(out))' "$@"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$results_rows"' EXIT

# front ends that exist: rqbench exits 2 for one not implemented yet
fronts=()
for f in mq sq; do
	if "$rqbench" --front "$f" --ops 1000 --json >/dev/null 2>"$tmp/err"; then
		fronts+=("$f")
	else
		echo "front end $f: $(head -n1 "$tmp/err" | sed 's/^rqbench: //')"
	fi
done

# the schedulers of each front end, to count the runs
declare -A scheds_of
runs=0
for f in "${fronts[@]}"; do
	scheds=$("$rqbench" --front "$f" --list-scheds 2>/dev/null)
	[ -n "$scheds" ] || scheds=none
	scheds_of[$f]=$scheds
	runs=$((runs + $(wc -w <<<"$scheds") * 4))
done
progress_total $((runs + 1))

echo
echo "librequest: rqbench, null driver (inline), 4 KiB, depth 32, batch 32, ${secs}s per run"
echo
echo "| front | sched | threads | pattern | IOPS | p50 ns | p99 ns | requests | merges | allocs |"
echo "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"
for f in "${fronts[@]}"; do
	for s in ${scheds_of[$f]}; do
		for t in 1 2; do
			for p in randread randwrite; do
				progress "rqbench $f/$s, $t thread(s), $p, ${secs}s"
				if "$rqbench" --front "$f" --sched "$s" --threads "$t" \
					--pattern "$p" --bs 4096 --depth 32 --batch 32 \
					--seconds "$secs" --json >"$tmp/r.json" 2>"$tmp/err"; then
					read -r iops p50 p99 reqs merges allocs < <(fields "$tmp/r.json" \
						iops lat_ns.p50 lat_ns.p99 requests merges allocs)
					printf '| %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s |\n' \
						"$f" "$s" "$t" "$p" "$iops" "$p50" "$p99" "$reqs" \
						"$merges" "$allocs"
					results_row front="$f" sched="$s" threads="$t" pattern="$p" \
						iops="$iops" p50_ns="$p50" p99_ns="$p99" requests="$reqs" \
						merges="$merges" allocs="$allocs" error=
				else
					echo "| $f | $s | $t | $p | failed: $(head -n1 "$tmp/err" | tr '|' ' ') | | | | | |"
					results_row front="$f" sched="$s" threads="$t" pattern="$p" \
						iops= p50_ns= p99_ns= requests= merges= allocs= \
						error="$(head -n1 "$tmp/err")"
				fi
			done
		done
	done
done

results_write

echo
echo "Peers (quick):"
echo
progress "peers.sh --quick"
"$here/peers.sh" --quick ${build:+--build "$build"}
