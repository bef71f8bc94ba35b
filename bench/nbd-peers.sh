#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# NBD block servers compared, in one run, by the same fio job (ioengine=nbd
# over a unix socket, 4 KiB random reads and writes, iodepth 32, one and two
# jobs): rqnbd over its memory device, nbdkit's memory plugin and qemu-nbd
# over a file in /dev/shm.  Each export is 1 GiB, filled with data first so
# reads do not hit holes.  All three run at once and the fio runs
# interleave, round after round.  Prints a markdown table (median IOPS per
# server and job, and rqnbd's ratio to the best peer).
#
# usage: bench/nbd-peers.sh [--runtime S] [--rounds N] [--build DIR] [--rqnbd-args "..."]
#   --runtime S      seconds per fio run (default 5)
#   --rounds N       rounds; the table shows the median (default 3)
#   --build DIR      meson build directory holding examples/nbd/rqnbd
#                    (default: $RQNBD, else the first of build, build-* that has it)
#   --rqnbd-args A   extra rqnbd options (e.g. "--sched mq-deadline --queues 1")
#   --json FILE, --csv FILE  where the table goes as JSON and CSV, one row per
#                    server, pattern and job count with the median and every
#                    round's IOPS (default: bench-results/nbd-peers.json
#                    and .csv in the build directory)
#   --plot FILE      also draw the table (bench/plot.py nbd-peers) into FILE
# Servers or fio missing: that column is skipped; fio missing: exit 77.
# A progress line per server start and per fio run goes to stderr.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/results.sh
. "$here/results.sh"
results_init nbd-peers "$@"
runtime=5
rounds=3
plot=""
build=""
rqargs=""
while [ $# -gt 0 ]; do
	case "$1" in
	--runtime) runtime="$2"; shift ;;
	--rounds) rounds="$2"; shift ;;
	--build) build="$2"; shift ;;
	--rqnbd-args) rqargs="$2"; shift ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift ;;
	--plot) plot="${2:-}"; [ -n "$plot" ] || { echo "nbd-peers.sh: --plot needs a file name" >&2; exit 2; }; shift ;;
	-h|--help) sed -n '3,24p' "$0"; exit 0 ;;
	*) echo "nbd-peers.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

command -v fio >/dev/null || { echo "nbd-peers.sh: fio is missing" >&2; exit 77; }
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "nbd-peers.sh: fio lacks the nbd engine" >&2; exit 77; }

find_rqnbd() {
	if [ -n "${RQNBD:-}" ]; then echo "$RQNBD"; return; fi
	if [ -n "$build" ]; then echo "$build/examples/nbd/rqnbd"; return; fi
	for d in "$top"/build "$top"/build-*; do
		if [ -x "$d/examples/nbd/rqnbd" ]; then echo "$d/examples/nbd/rqnbd"; return; fi
	done
	echo ""
}
rqnbd=$(find_rqnbd)
[ -n "$rqnbd" ] && results_in "$(dirname "$(dirname "$(dirname "$rqnbd")")")"

tmp=$(mktemp -d /tmp/nbd-peers.XXXXXX)
shm=/dev/shm/nbd-peers.$$.img
pids=()
stop_servers() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	pids=()
}
trap 'stop_servers; rm -rf "$tmp"; rm -f "$shm" "$results_rows"' EXIT

wait_socket() {
	for _ in $(seq 100); do
		[ -S "$1" ] && return 0
		sleep 0.05
	done
	return 1
}

# fio_iops SOCK RW JOBS: IOPS of one run
fio_iops() {
	local out="$tmp/fio.json"
	fio --name=bench --ioengine=nbd --uri="nbd+unix:///?socket=$1" \
	    --rw="$2" --bs=4k --iodepth=32 --numjobs="$3" --group_reporting \
	    --time_based --runtime="$runtime" --ramp_time=1 --size=1g \
	    --norandommap --randrepeat=0 --output-format=json >"$out" 2>"$tmp/fio.err" ||
		{ sed "s/^/fio: /" "$tmp/fio.err" | head -5 >&2; echo "-"; return; }
	python3 -c 'import json,sys
t=open(sys.argv[1]).read()
d=json.loads(t[t.index("{"):])["jobs"][0]
print(int(d["read"]["iops"] + d["write"]["iops"]))' "$out"
}

# fill SOCK: write the whole export once (1 MiB sequential writes)
fill() {
	fio --name=fill --ioengine=nbd --uri="nbd+unix:///?socket=$1" --rw=write \
	    --bs=1m --iodepth=8 --size=1g >/dev/null 2>&1
}

# All servers run at once, each on its own socket, and the runs interleave
# (round by round, server by server), so a noisy machine hurts all alike;
# the table shows the median of the rounds.
servers=()
start_server() { # NAME COMMAND...
	local name=$1
	shift
	progress "start $name and fill its 1 GiB export"
	"$@" 2>"$tmp/$name.log" &
	pids+=($!)
	if wait_socket "$tmp/$name.sock" && fill "$tmp/$name.sock"; then
		servers+=("$name")
	else
		echo "nbd-peers.sh: $name did not start" >&2
		cat "$tmp/$name.log" >&2
	fi
}

# steps: a start per server found, then rounds of 4 fio runs per server
nservers=0
[ -n "$rqnbd" ] && [ -x "$rqnbd" ] && nservers=$((nservers + 1))
command -v nbdkit >/dev/null && nservers=$((nservers + 1))
command -v qemu-nbd >/dev/null && nservers=$((nservers + 1))
progress_total $((nservers + rounds * 4 * nservers))

if [ -n "$rqnbd" ] && [ -x "$rqnbd" ]; then
	# shellcheck disable=SC2086
	start_server rqnbd "$rqnbd" --unix "$tmp/rqnbd.sock" --memory 1G $rqargs
else
	echo "nbd-peers.sh: rqnbd not found (build it, or set RQNBD)" >&2
fi
if command -v nbdkit >/dev/null; then
	start_server nbdkit-memory nbdkit -f -U "$tmp/nbdkit-memory.sock" memory 1G
fi
if command -v qemu-nbd >/dev/null; then
	truncate -s 1G "$shm"
	# tmpfs has no O_DIRECT: --cache=writeback; -t: stay up between clients;
	# -e 4: fio's two jobs connect at once
	start_server qemu-nbd-shm qemu-nbd -t -k "$tmp/qemu-nbd-shm.sock" -f raw \
		--cache=writeback --aio=threads -e 4 "$shm"
fi

# the servers that did not start have no runs
progress_total $((progress_n + rounds * 4 * ${#servers[@]}))
declare -A runs
for round in $(seq "$rounds"); do
	for rw in randread randwrite; do
		for jobs in 1 2; do
			for s in "${servers[@]}"; do
				progress "round $round: fio $rw, $jobs job(s), ${runtime}s against $s"
				runs["$s,$rw,$jobs"]+="$(fio_iops "$tmp/$s.sock" $rw $jobs) "
			done
		done
	done
done
stop_servers

declare -A result
for k in "${!runs[@]}"; do
	result[$k]=$(python3 -c 'import sys
v=sorted(int(x) for x in sys.argv[1:] if x != "-")
print(v[len(v)//2] if v else "-")' ${runs[$k]})
done

echo "fio ioengine=nbd, unix socket, bs=4k, iodepth=32, ${runtime} s per run, median of $rounds interleaved rounds; IOPS"
echo
printf '| server |'
for rw in randread randwrite; do for jobs in 1 2; do printf ' %s %s job%s |' $rw $jobs "$([ $jobs = 1 ] || echo s)"; done; done
echo
printf '|---|'
for _ in 1 2 3 4; do printf -- '---:|'; done
echo
for s in "${servers[@]}"; do
	printf '| %s |' "$s"
	for rw in randread randwrite; do
		for jobs in 1 2; do
			printf ' %s |' "${result[$s,$rw,$jobs]}"
			iops=${result[$s,$rw,$jobs]}
			runs_list=${runs[$s,$rw,$jobs]}
			results_row server="$s" pattern="$rw" jobs="$jobs" \
				iops="$([ "$iops" = - ] || echo "$iops")" rounds="${runs_list% }"
		done
	done
	echo
done
if [ -n "${result[rqnbd,randread,1]:-}" ]; then
	printf '| rqnbd / best peer |'
	for rw in randread randwrite; do
		for jobs in 1 2; do
			best=0
			for s in "${servers[@]}"; do
				[ "$s" = rqnbd ] && continue
				v=${result[$s,$rw,$jobs]}
				[ "$v" != "-" ] && [ "$v" -gt "$best" ] && best=$v
			done
			r=${result[rqnbd,$rw,$jobs]}
			if [ "$best" -gt 0 ] && [ "$r" != "-" ]; then
				printf ' %s |' "$(python3 -c "print(f'{$r/$best:.2f}x')")"
			else
				printf ' - |'
			fi
		done
	done
	echo
fi
results_write
if [ -n "$plot" ]; then
	"$here/plot.py" nbd-peers "$results_json" "$plot" || exit 1
	echo "nbd-peers: plot in $plot" >&2
fi
