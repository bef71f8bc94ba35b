#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The quick-start's main job (about 20-40 s): rqbench over every front end
# and scheduler the build offers, 1 and 2 threads, 4 KiB randread and
# randwrite, one second each; then the peers in quick mode.
#
# usage: bench/demo.sh [--build DIR] [--seconds S]
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=""
secs=1
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build="$2"; shift ;;
	--seconds) secs="$2"; shift ;;
	-h|--help) sed -n '3,8p' "$0"; exit 0 ;;
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

# field FILE KEY: a top-level or lat_ns number from rqbench's JSON line
field() {
	python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d=d[k]
print(d if d is not None else "-")' "$1" "$2"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# front ends that exist: rqbench exits 2 for one not implemented yet
fronts=()
for f in mq sq; do
	if "$rqbench" --front "$f" --ops 1000 --json >/dev/null 2>"$tmp/err"; then
		fronts+=("$f")
	else
		echo "front end $f: $(head -n1 "$tmp/err" | sed 's/^rqbench: //')"
	fi
done

echo
echo "librequest: rqbench, null driver (inline), 4 KiB, depth 32, batch 32, ${secs}s per run"
echo
echo "| front | sched | threads | pattern | IOPS | p50 ns | p99 ns | requests | merges | allocs |"
echo "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"
for f in "${fronts[@]}"; do
	scheds=$("$rqbench" --front "$f" --list-scheds 2>/dev/null)
	[ -n "$scheds" ] || scheds=none
	for s in $scheds; do
		for t in 1 2; do
			for p in randread randwrite; do
				if "$rqbench" --front "$f" --sched "$s" --threads "$t" \
					--pattern "$p" --bs 4096 --depth 32 --batch 32 \
					--seconds "$secs" --json >"$tmp/r.json" 2>"$tmp/err"; then
					printf '| %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s |\n' \
						"$f" "$s" "$t" "$p" "$(field "$tmp/r.json" iops)" \
						"$(field "$tmp/r.json" lat_ns.p50)" \
						"$(field "$tmp/r.json" lat_ns.p99)" \
						"$(field "$tmp/r.json" requests)" \
						"$(field "$tmp/r.json" merges)" \
						"$(field "$tmp/r.json" allocs)"
				else
					echo "| $f | $s | $t | $p | failed: $(head -n1 "$tmp/err" | tr '|' ' ') | | | | | |"
				fi
			done
		done
	done
done

echo
echo "Peers (quick):"
echo
"$here/peers.sh" --quick ${build:+--build "$build"}
