#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# How fast rqreplay replays: I/Os per second of replay, for a generated
# trace of N I/Os (default one million: 4 pids, 70 % reads, 4 KiB random
# over 16 GiB, one every 20 us), under each multi-queue scheduler on the
# nvme model (open loop: the trace's times) and on the hdd-7200 model
# (closed loop, depth 4 per stream: an open loop at 50 000 I/Os per second
# would only grow the disk's queue).
#
# Reported per run: wall seconds, CPU seconds (user + system: the replay is
# one thread on one CPU, so this is its cost on one core even when the
# machine is shared), and I/Os per second of each.
#
#   bench/replay-speed.sh [BUILD_DIR] [N]
set -eu
build=${1:-build}
n=${2:-1000000}
R=$build/examples/replay/rqreplay
[ -x "$R" ] || { echo "no $R: build first (meson setup build && ninja -C build)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/rq-replay-speed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

awk -v n="$n" 'BEGIN { print "time_ns,pid,op,offset,bytes"; s = 12345;
	for (i = 0; i < n; i++) {
		s = (s * 1103515245 + 12345) % 2147483648; h = int(s / 64);
		printf "%.0f,%d,%s,%.0f,4096\n", i * 20000, 1 + i % 4, (h % 10 < 7) ? "R" : "W",
			(h % 4194304) * 4096;
	} }' > "$tmp/trace.csv"

echo "rqreplay speed, $n I/Os per run, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-9s %-12s %-14s %8s %8s %12s %12s\n' model sched mode wall_s cpu_s ios/s_wall ios/s_cpu
run() { # MODEL SCHED MODE-ARGS...
	model=$1 sched=$2
	shift 2
	/usr/bin/time -f '%e %U %S' -o "$tmp/time" "$R" --model "$model" --sched "$sched" "$@" \
		"$tmp/trace.csv" > "$tmp/out"
	read -r wall user sys < "$tmp/time"
	grep -q "^all  *$n " "$tmp/out" || { echo "run did not complete every I/O" >&2; exit 1; }
	awk -v m="$model" -v s="$sched" -v mode="${*:-open}" -v w="$wall" -v u="$user" \
		-v y="$sys" -v n="$n" 'BEGIN { c = u + y;
		printf "%-9s %-12s %-14s %8.2f %8.2f %12.0f %12.0f\n", m, s, mode, w, c,
			n / w, (c > 0 ? n / c : 0) }'
}
for s in none mq-deadline kyber bfq; do
	run nvme "$s"
done
for s in none mq-deadline kyber bfq; do
	run hdd-7200 "$s" --closed --depth 4
done
