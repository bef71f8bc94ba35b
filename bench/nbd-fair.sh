#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Fairness between NBD clients sharing one slow disk, with real clients:
# fio (ioengine=nbd, uri=nbd+unix://...) against rqnbd, nbdkit and
# qemu-nbd, each over a backend that does IOPS requests per second at most
# (default 500), so the disk, not the CPU, is the bottleneck:
#   rqnbd     a "paced" export: memory, one request at a time, each taking
#             1/IOPS s (doc/nbd.md)
#   nbdkit    memory plugin, noparallel filter (serialize=all-requests) and
#             delay filter (1000/IOPS ms per request): the same model
#   qemu-nbd  null-co behind a throttle group of IOPS (a token bucket:
#             requests overlap, bursts pass)
# Two scenarios per server:
#   fair  two clients at once (two jobs of one fio), 4 KiB random reads,
#         iodepth 16 each, counted while both run (per-request logs); on rqnbd
#         client "gold" is in an io group of weight 1000 and "bronze" in one
#         of weight 100 (bfq on the mq front end, cfq on the sq front end):
#         the throughput ratio should be 10:1, accepted within 20 %
#         (8 .. 12).  nbdkit and qemu-nbd cannot weight: their split is shown.
#   lat   a latency-sensitive reader (4 KiB random reads, iodepth 1): its
#         p99 alone, then with a bulk writer (64 KiB sequential writes,
#         iodepth 4: 64 requests of the paced disk) on the same export;
#         rqnbd under none, mq-deadline,
#         kyber, bfq (mq) and cfq (sq), and bfq with the reader in class rt.
#
# usage: bench/nbd-fair.sh [--quick] [--runtime S] [--iops N] [--build DIR]
#                          [--json FILE] [--csv FILE] [--md FILE]
#   --quick          3 s runs (default 15 s)
#   --runtime S      seconds per fio run
#   --iops N         the backend's requests per second, dividing 1000 (500)
#   --build DIR      meson build directory holding examples/nbd/rqnbd
#                    (default: $RQNBD, else the first of build, build-* that has it)
#   --json, --csv, --md FILE  where the results go (default: bench-results/
#                    nbd-fair.json, .csv and .md in the build directory)
# The markdown table also goes to stdout; a progress line per run to stderr.
# fio (with its nbd engine) missing: exit 77; nbdkit or qemu-nbd missing:
# their rows are left out.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
# shellcheck source=bench/results.sh
. "$here/results.sh"
results_init nbd-fair "$@"
runtime=15
iops=500
build=""
md=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) runtime=3 ;;
	--runtime) runtime="${2:-}"; shift ;;
	--iops) iops="${2:-}"; shift ;;
	--build) build="${2:-}"; shift ;;
	--md) md="${2:-}"; [ -n "$md" ] || { echo "nbd-fair.sh: --md needs a file name" >&2; exit 2; }; shift ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift ;;
	-h|--help) sed -n '3,/^set -u/{/^set -u/d;p}' "$0"; exit 0 ;;
	*) echo "nbd-fair.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
case "$runtime" in ''|*[!0-9]*|0) echo "nbd-fair.sh: --runtime: '$runtime' is not a number of seconds" >&2; exit 2 ;; esac
case "$iops" in ''|*[!0-9]*|0) echo "nbd-fair.sh: --iops: '$iops' is not a positive number" >&2; exit 2 ;; esac
[ $((1000 % iops)) -eq 0 ] || [ $((iops % 1000)) -eq 0 ] ||
	{ echo "nbd-fair.sh: --iops: $iops does not divide 1000 (nbdkit's delay is in ms)" >&2; exit 2; }
[ "$iops" -le 1000 ] || { echo "nbd-fair.sh: --iops: at most 1000" >&2; exit 2; }

command -v fio >/dev/null || { echo "nbd-fair.sh: fio is missing" >&2; exit 77; }
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "nbd-fair.sh: fio lacks the nbd engine" >&2; exit 77; }

# rqnbd: $RQNBD, else --build's, else the first build directory that has one
rqnbd=${RQNBD:-}
[ -z "$rqnbd" ] && [ -n "$build" ] && rqnbd=$build/examples/nbd/rqnbd
if [ -z "$rqnbd" ]; then
	for d in "$top"/build "$top"/build-*; do
		[ -x "$d/examples/nbd/rqnbd" ] && { rqnbd=$d/examples/nbd/rqnbd; break; }
	done
fi
[ -n "$rqnbd" ] && [ -x "$rqnbd" ] || { echo "nbd-fair.sh: rqnbd not found (build it, or set RQNBD)" >&2; exit 2; }
results_in "$(dirname "$(dirname "$(dirname "$rqnbd")")")"

tmp=$(mktemp -d /tmp/nbd-fair.XXXXXX)
pids=()
# stop_servers: SIGTERM, up to 5 s to go, then SIGKILL
stop_servers() {
	[ ${#pids[@]} -gt 0 ] || return 0
	kill "${pids[@]}" 2>/dev/null
	local until=$((SECONDS + 5))
	while kill -0 "${pids[@]}" 2>/dev/null && [ $SECONDS -lt $until ]; do sleep 0.1; done
	kill -9 "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	pids=()
}
trap 'stop_servers; rm -rf "$tmp"; rm -f "$results_rows"' EXIT
# started NAME SOCK: wait up to 5 s for the server's socket, or say why not
started() {
	timeout 5 sh -c 'until [ -S "$0" ]; do sleep 0.05; done' "$2" && return 0
	echo "nbd-fair.sh: $1 did not start" >&2
	cat "$tmp/$1.log" >&2
	return 1
}

# The rqnbd configuration: one paced export per scheduler, the weighted
# clients named by alias.
cat >"$tmp/rqnbd.conf" <<EOF
[server]
unix = $tmp/rqnbd.sock
unnamed = own

[group gold]
weight = 1000
[group bronze]
weight = 100

EOF
for e in fair-bfq:mq:bfq fair-cfq:sq:cfq lat-none:mq:none lat-mq-deadline:mq:mq-deadline \
	 lat-kyber:mq:kyber lat-bfq:mq:bfq lat-cfq:sq:cfq; do
	IFS=: read -r name front sched <<<"$e"
	printf "[export %s]\nbackend = paced %s 256M\nfront = %s\nsched = %s\n\n" \
		"$name" "$iops" "$front" "$sched" >>"$tmp/rqnbd.conf"
done
for sc in bfq cfq; do
	for g in gold bronze; do
		printf '[client %s-%s]\nexport = fair-%s\ngroup = %s\n' "$g" "$sc" "$sc" "$g" \
			>>"$tmp/rqnbd.conf"
	done
done
printf '[client reader-rt]\nexport = lat-bfq\nclass = rt\nlevel = 4\n' >>"$tmp/rqnbd.conf"

# fio_run OUT URI RW BS DEPTH [URI RW BS DEPTH]: one client, or two as two
# jobs of one fio (they start and stop together); JSON to OUT, every
# completion logged with its time in OUT_clat.N.log
fio_run() {
	local out=$1 jobs=()
	shift
	while [ $# -ge 4 ]; do
		jobs+=(--name="c${#jobs[@]}" --uri="$1" --rw="$2" --bs="$3" --iodepth="$4")
		shift 4
	done
	rm -f "$out"_*.log
	fio --ioengine=nbd --time_based --runtime="$runtime" --size=256m --norandommap \
	    --randrepeat=0 --write_lat_log="$out" --log_unix_epoch=1 \
	    --output-format=json --output="$out" "${jobs[@]}" >/dev/null 2>"$out.err" ||
		sed "s/^/fio: /" "$out.err" | head -5 >&2
}

# fio_get FILE JOB FIELD: iops or p99 (ms) of job JOB (0, 1) of a run
fio_get() {
	python3 - "$@" <<'EOF'
import json, sys
try:
    t = open(sys.argv[1]).read()
    j = json.loads(t[t.index("{"):])["jobs"][int(sys.argv[2])]
except (OSError, ValueError, KeyError, IndexError):
    print("-"); sys.exit(0)
d = j["read"] if j["read"]["total_ios"] else j["write"]
if sys.argv[3] == "iops":
    print("%.1f" % (j["read"]["iops"] + j["write"]["iops"]))
else:
    p = d["clat_ns"].get("percentile", {}).get("99.000000")
    print("%.1f" % (p / 1e6) if p else "-")
EOF
}

# window FILE: "A_IOPS B_IOPS A/B" over the time both clients of a run were
# running (from 1 s after the later first completion to the earlier last)
window() {
	python3 - "$1_clat.1.log" "$1_clat.2.log" <<'EOF'
import sys
try:
    ts = [[int(l.split(",")[0]) for l in open(f)] for f in sys.argv[1:3]]
    lo, hi = max(min(t) for t in ts) + 1000, min(max(t) for t in ts)
    a, b = (sum(1 for x in t if lo <= x <= hi) for t in ts)
    s = (hi - lo) / 1000
    print("%.1f %.1f %s" % (a / s, b / s, "%.2f" % (a / b) if b else "-"))
except (OSError, ValueError, ZeroDivisionError):
    print("- - -")
EOF
}

uri() { # SOCK NAME
	echo "nbd+unix:///$2?socket=$1"
}

# fair SERVER SCHED SOCK NAME_A NAME_B WEIGHTS: two clients at once
fair() {
	local f="$tmp/fair" ia ib ratio ok=-
	progress "$1 $2: two clients, ${runtime}s"
	fio_run "$f" "$(uri "$3" "$4")" randread 4k 16 "$(uri "$3" "$5")" randread 4k 16
	read -r ia ib ratio <<<"$(window "$f")"
	if [ "$1" = rqnbd ] && [ "$ratio" != - ]; then
		ok=$(python3 -c 'import sys; print("yes" if 8 <= float(sys.argv[1]) <= 12 else "NO")' "$ratio")
	fi
	results_row scenario=fair server="$1" sched="$2" weights="$6" client_a_iops="$ia" \
		client_b_iops="$ib" ratio="$ratio" within_20pct="$ok"
	fair_rows+=("| $1 | $2 | $6 | $ia | $ib | $ratio | $ok |")
}

# lat SERVER SCHED SOCK READER_NAME WRITER_NAME: reader alone, then with a writer
lat() {
	local r0="$tmp/lat0" r1="$tmp/lat1"
	progress "$1 $2: reader alone, ${runtime}s"
	fio_run "$r0" "$(uri "$3" "$4")" randread 4k 1
	progress "$1 $2: reader with a bulk writer, ${runtime}s"
	fio_run "$r1" "$(uri "$3" "$4")" randread 4k 1 "$(uri "$3" "$5")" write 64k 4
	local p0 p1 i0 i1 iw
	p0=$(fio_get "$r0" 0 p99); i0=$(fio_get "$r0" 0 iops)
	p1=$(fio_get "$r1" 0 p99); i1=$(fio_get "$r1" 0 iops)
	iw=$(fio_get "$r1" 1 iops)
	results_row scenario=lat server="$1" sched="$2" reader_alone_iops="$i0" \
		reader_alone_p99_ms="$p0" reader_iops="$i1" reader_p99_ms="$p1" writer_iops="$iw"
	lat_rows+=("| $1 | $2 | $i0 | $p0 | $i1 | $p1 | $iw |")
}

fair_rows=()
lat_rows=()
have_nbdkit=0; command -v nbdkit >/dev/null && have_nbdkit=1
have_qemu=0; command -v qemu-nbd >/dev/null && have_qemu=1
progress_total $((1 + 2 + 7 * 2 + (have_nbdkit + have_qemu) * 4))

progress "start rqnbd (7 paced exports at $iops IOPS)"
"$rqnbd" --config "$tmp/rqnbd.conf" 2>"$tmp/rqnbd.log" &
pids+=($!)
started rqnbd "$tmp/rqnbd.sock" || exit 1
s=$tmp/rqnbd.sock
fair rqnbd "bfq (mq)" "$s" gold-bfq bronze-bfq "1000:100"
fair rqnbd "cfq (sq)" "$s" gold-cfq bronze-cfq "1000:100"
for sc in none mq-deadline kyber bfq; do
	lat rqnbd "$sc (mq)" "$s" "lat-$sc" "lat-$sc"
done
lat rqnbd "cfq (sq)" "$s" lat-cfq lat-cfq
lat rqnbd "bfq (mq), reader rt" "$s" reader-rt lat-bfq
stop_servers

if [ $have_nbdkit = 1 ]; then
	progress "start nbdkit (memory, noparallel, delay $((1000 / iops)) ms)"
	nbdkit -f -U "$tmp/nbdkit.sock" --filter=noparallel --filter=delay memory 256M \
		serialize=all-requests delay-read=$((1000 / iops))ms \
		delay-write=$((1000 / iops))ms 2>"$tmp/nbdkit.log" &
	pids+=($!)
	if started nbdkit "$tmp/nbdkit.sock"; then
		fair nbdkit "-" "$tmp/nbdkit.sock" "" "" "cannot weight"
		lat nbdkit "-" "$tmp/nbdkit.sock" "" ""
	fi
	stop_servers
fi
if [ $have_qemu = 1 ]; then
	progress "start qemu-nbd (null-co, throttle group of $iops IOPS)"
	qemu-nbd -t -e 8 -k "$tmp/qemu.sock" \
		--object "throttle-group,id=tg0,x-iops-total=$iops" \
		--image-opts "driver=throttle,throttle-group=tg0,file.driver=null-co,file.size=256M" \
		2>"$tmp/qemu.log" &
	pids+=($!)
	if started qemu "$tmp/qemu.sock"; then
		fair qemu-nbd "-" "$tmp/qemu.sock" "" "" "cannot weight"
		lat qemu-nbd "-" "$tmp/qemu.sock" "" ""
	fi
	stop_servers
fi

table() {
	echo "Backend: $iops requests/s at most; fio ioengine=nbd over a unix socket, ${runtime} s per run."
	echo
	echo "Two clients at once (4 KiB random reads, iodepth 16 each; IOPS while both ran); weights are the clients' io groups; target 10:1, accepted 8..12."
	echo
	echo "| server | scheduler | weights | client A IOPS | client B IOPS | A/B | within 20 % |"
	echo "|---|---|---|---:|---:|---:|---|"
	printf '%s\n' "${fair_rows[@]}"
	echo
	echo "A latency-sensitive reader (4 KiB random reads, iodepth 1), alone and with a bulk writer (64 KiB sequential writes, iodepth 4; 16 paced requests each)."
	echo
	echo "| server | scheduler | reader alone IOPS | alone p99 ms | reader IOPS with writer | p99 ms with writer | writer IOPS |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	printf '%s\n' "${lat_rows[@]}"
}
table
md=${md:-$results_dir/nbd-fair.md}
mkdir -p "$(dirname "$md")" && table >"$md" && echo "nbd-fair: table in $md" >&2
results_write
