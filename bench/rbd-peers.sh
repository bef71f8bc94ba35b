#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd over RBD against qemu-nbd over the same image, in one run, on a
# one-node Ceph cluster (scripts/ceph-fixture.sh: memstore OSD, so the
# numbers are the client side's, not a disk's):
#   servers  rqnbd --rbd with the schedulers none, mq-deadline and bfq
#            (two hardware queues, two image handles) and qemu-nbd
#            --cache=none with qemu's rbd driver (librbd's cache off in
#            both), all serving the same image at once (no exclusive lock);
#   IOPS     fio's nbd engine, 4 KiB random reads, random writes and
#            sequential writes at iodepth 32, round after round (median);
#   merges   fio writes 32 MiB sequentially in 4 KiB blocks at iodepth 64
#            (rqnbd's limit of commands in flight per connection) through
#            each server, and the OSD's op_w counter (perf dump) says how
#            many RADOS writes that took: through NBD a merged request can
#            hold at most what the client has in flight (64 x 4 KiB); and
#            rbdq, bios submitted in one process (256 KiB each, in one
#            plug), where requests grow to one object (4 MiB).
# librbd's own write merging (rbd_io_scheduler = simple, Pacific's default,
# which holds and joins sequential writes to one object) is turned off for
# every server (CEPH_ARGS; qemu-nbd: an option of its rbd: filename), so the RADOS counts show the request layer's
# merging alone; --librbd-sched simple keeps it.
# Prints two markdown tables.
#
# usage: bench/rbd-peers.sh [--runtime S] [--rounds N] [--build DIR]
#                           [--librbd-sched none|simple]
#   --runtime S   seconds per fio run (default 5)
#   --rounds N    rounds of the IOPS runs; the table shows the median (default 3)
#   --build DIR   meson build directory holding examples/nbd/rqnbd (default:
#                 $RQNBD, else the first of build, build-* that has it)
#   --librbd-sched S  librbd's rbd_io_scheduler for every server (default none)
# Exit 77 when fio (with its nbd engine) is missing or Ceph cannot run here;
# without qemu-nbd's rbd driver (Debian: qemu-block-extra) its rows are
# left out, with the reason on stderr.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
runtime=5
rounds=3
build=""
librbd_sched=none
while [ $# -gt 0 ]; do
	case "$1" in
	--runtime) runtime=${2:-}; shift ;;
	--rounds) rounds=${2:-}; shift ;;
	--build) build=${2:-}; shift ;;
	--librbd-sched) librbd_sched=${2:-}; shift ;;
	-h|--help) sed -n '3,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "rbd-peers.sh: $1: unknown argument" >&2; exit 2 ;;
	esac
	shift
done
case $runtime in ''|*[!0-9]*|0) echo "rbd-peers.sh: --runtime: '$runtime' is not a positive whole number" >&2; exit 2 ;; esac
case $librbd_sched in none|simple) ;; *) echo "rbd-peers.sh: --librbd-sched: '$librbd_sched' is not none or simple" >&2; exit 2 ;; esac
case $rounds in ''|*[!0-9]*|0) echo "rbd-peers.sh: --rounds: '$rounds' is not a positive whole number" >&2; exit 2 ;; esac

command -v fio >/dev/null || { echo "rbd-peers.sh: fio is missing" >&2; exit 77; }
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "rbd-peers.sh: fio lacks the nbd engine" >&2; exit 77; }

rqnbd=${RQNBD:-}
if [ -z "$rqnbd" ]; then
	for d in ${build:+"$build"} "$top"/build "$top"/build-*; do
		[ -x "$d/examples/nbd/rqnbd" ] && { rqnbd=$d/examples/nbd/rqnbd; break; }
	done
fi
[ -x "$rqnbd" ] || { echo "rbd-peers.sh: no rqnbd (build first, or --build DIR)" >&2; exit 1; }
"$rqnbd" --help | grep -q -- --rbd || { echo "rbd-peers.sh: $rqnbd was built without librbd" >&2; exit 77; }

tmp=$(mktemp -d /tmp/rbd-peers.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -n "${CEPH_FIXTURE_DIR:-}" ] && "$top/scripts/ceph-fixture.sh" stop "$CEPH_FIXTURE_DIR" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "rbd-peers.sh: starting a one-node Ceph cluster" >&2
envs=$(CEPH_FIXTURE_IMAGE_SIZE=${CEPH_FIXTURE_IMAGE_SIZE:-512M} \
	"$top/scripts/ceph-fixture.sh" start "$tmp/ceph") || exit $?
eval "$envs"
# for the servers only: the ceph CLI would take CEPH_ARGS as its arguments
server_args="${CEPH_ARGS:-} --rbd_io_scheduler=$librbd_sched"

wait_socket() {
	for _ in $(seq 200); do
		[ -S "$1" ] && return 0
		sleep 0.05
	done
	echo "rbd-peers.sh: no server on $1" >&2
	return 1
}

servers=()
for s in none mq-deadline bfq; do
	CEPH_ARGS=$server_args "$rqnbd" --unix "$tmp/$s.sock" --rbd "$RBD_SPEC" --ceph-conf "$CEPH_CONF" \
		--queues 2 --sched "$s" 2>"$tmp/$s.log" &
	pids+=($!)
	wait_socket "$tmp/$s.sock" || { cat "$tmp/$s.log" >&2; exit 1; }
	servers+=("$s")
done
if ! command -v qemu-nbd >/dev/null; then
	echo "rbd-peers.sh: qemu-nbd is missing: no qemu-nbd rows" >&2
elif ! qemu-img --help 2>/dev/null | grep -q 'formats:.* rbd'; then
	echo "rbd-peers.sh: qemu-img lists no rbd driver: no qemu-nbd rows" >&2
else
	qemu-nbd -f raw --persistent --shared=8 --cache=none --socket="$tmp/qemu-nbd.sock" \
		"rbd:$RBD_SPEC:conf=$CEPH_CONF:rbd_io_scheduler=$librbd_sched" 2>"$tmp/qemu-nbd.log" &
	pids+=($!)
	if wait_socket "$tmp/qemu-nbd.sock"; then
		servers+=(qemu-nbd)
	else
		echo "rbd-peers.sh: qemu-nbd did not start (Debian: qemu-block-extra has its rbd driver): $(tail -n 1 "$tmp/qemu-nbd.log")" >&2
	fi
fi
uri() { echo "nbd+unix:///?socket=$tmp/$1.sock"; }
label() { [ "$1" = qemu-nbd ] && echo "qemu-nbd --cache=none" || echo "rqnbd --rbd, $1"; }

osd_w() {
	timeout 20 ceph --admin-daemon "$CEPH_FIXTURE_DIR/run/osd.0.asok" perf dump |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["osd"]["op_w"])'
}

# fill the image first, so reads do not hit absent objects
echo "rbd-peers.sh: filling the image" >&2
fio --name=fill --ioengine=nbd --uri="$(uri none)" --rw=write --bs=1m --iodepth=8 \
	--size=100% >/dev/null 2>&1 || { echo "rbd-peers.sh: fill failed" >&2; exit 1; }

# fio_iops SERVER RW: IOPS of one run
fio_iops() {
	fio --name=b --ioengine=nbd --uri="$(uri "$1")" --rw="$2" --bs=4k --iodepth=32 \
		--time_based --runtime="$runtime" --size=256m --randrepeat=0 \
		--output-format=json --output="$tmp/fio.json" >/dev/null 2>"$tmp/fio.err" ||
		{ echo "rbd-peers.sh: fio $1 $2 failed: $(tail -n 1 "$tmp/fio.err")" >&2; echo 0; return; }
	python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print(int(j["read"]["iops"] + j["write"]["iops"]))' "$tmp/fio.json"
}

patterns=(randread randwrite write)
declare -A runs
for r in $(seq "$rounds"); do
	for p in "${patterns[@]}"; do
		for s in "${servers[@]}"; do
			v=$(fio_iops "$s" "$p")
			runs[$s,$p]="${runs[$s,$p]:-} $v"
			echo "rbd-peers.sh: round $r, $p, $s: $v IOPS" >&2
		done
	done
done
median() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "## 4 KiB IOPS through NBD (fio nbd engine, iodepth 32, ${runtime} s, median of $rounds)"
echo
echo "| server | randread | randwrite | seq write |"
echo "|---|---:|---:|---:|"
for s in "${servers[@]}"; do
	printf '| %s |' "$(label "$s")"
	for p in "${patterns[@]}"; do printf ' %s |' "$(median "${runs[$s,$p]}")"; done
	echo
done

echo
echo "## Merges: 32 MiB of sequential 4 KiB writes (8192 writes, iodepth 64), RADOS writes counted on the OSD"
echo
echo "| server | NBD writes | RADOS writes | mean RADOS write | writes per RADOS write |"
echo "|---|---:|---:|---:|---:|"
off=0
for s in "${servers[@]}"; do
	before=$(osd_w)
	fio --name=m --ioengine=nbd --uri="$(uri "$s")" --rw=write --bs=4k --iodepth=64 \
		--offset=$((off << 20)) --size=32m >/dev/null 2>"$tmp/fio.err" ||
		echo "rbd-peers.sh: merge run on $s failed: $(tail -n 1 "$tmp/fio.err")" >&2
	after=$(osd_w)
	n=$((after - before))
	[ $n -gt 0 ] || { echo "rbd-peers.sh: no RADOS write counted for $s" >&2; continue; }
	printf '| %s | 8192 | %d | %d KiB | %s |\n' "$(label "$s")" "$n" $((32768 / n)) \
		"$(python3 -c "print(f'{8192 / $n:.1f}')")"
	off=$((off + 64))
done
rbdq=$(dirname "$(dirname "$rqnbd")")/rbd/rbdq
if [ -x "$rbdq" ]; then
	before=$(osd_w)
	out=$(CEPH_ARGS=$server_args "$rbdq" --ceph-conf "$CEPH_CONF" --json --write-only --offset $((off << 20)) \
		"$RBD_SPEC" 32) || echo "rbd-peers.sh: rbdq failed: $out" >&2
	after=$(osd_w)
	n=$((after - before))
	[ $n -gt 0 ] && printf '| rbdq (in process: 128 bios of 256 KiB, one plug; %s requests) | 128 | %d | %d KiB | %s |\n' \
		"$(echo "$out" | python3 -c 'import json, sys; print(json.load(sys.stdin)["writes"])')" \
		"$n" $((32768 / n)) "$(python3 -c "print(f'{128 / $n:.1f}')")"
fi
echo
echo "(one-node cluster: 1 memstore OSD, replication 1, 4 MiB objects, image features layering; librbd rbd_io_scheduler=$librbd_sched; $(nproc) CPUs shared)"
