#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# ceph-fixture.sh: a one-node Ceph cluster in a temporary directory, for the
# RBD tests and benchmark.  No systemd, no mgr: one ceph-mon on 127.0.0.1 and
# a free port, one to three ceph-osd with the memstore object store (data in
# memory, capped per OSD), auth none, replication size 1, one pool and one
# image.  Starting takes a few seconds; stopping removes everything.
#
#   ceph-fixture.sh start [DIR]      start; print the environment (sh syntax)
#   ceph-fixture.sh stop DIR         stop the daemons, remove DIR
#   ceph-fixture.sh run [--] CMD...  start, run CMD with the environment, stop;
#                                    exit with CMD's status (77: cannot start)
#   ceph-fixture.sh osd-stop DIR ID  stop one OSD (SIGTERM, bounded; SIGKILL)
#   ceph-fixture.sh osd-start DIR ID start it again, wait until it is up
#   ceph-fixture.sh check            exit 0 if the daemons are installed, else
#                                    77 with the reason
#   ceph-fixture.sh -h|--help
#
# The environment printed by start (and given to CMD by run):
#   CEPH_CONF           the cluster's ceph.conf (rbd, rados, ceph and librados
#                       read it; rqnbd and rbdq take it as --ceph-conf)
#   CEPH_FIXTURE_DIR    the temporary directory (pass it to stop)
#   RBD_POOL, RBD_IMAGE the pool and image made at start
#   RBD_SPEC            POOL/IMAGE
#
# Tunables (environment): CEPH_FIXTURE_OSDS (1..3, default 1),
# CEPH_FIXTURE_OSD_BYTES (memstore cap per OSD, default 1 GiB),
# CEPH_FIXTURE_IMAGE_SIZE (default 256M), CEPH_FIXTURE_OBJECT_SIZE (default
# 4M), CEPH_FIXTURE_FEATURES (image features, default "layering": no
# exclusive lock, so several handles write at once without passing a lock).
#
# Exit status: 0; 1 on failure of a started cluster; 2 on bad usage; 77 when
# this machine cannot run the daemons (not installed, or the monitor or an
# OSD does not come up: the reason and the log tail are printed on stderr).
set -u

prog=ceph-fixture.sh
nr_osds=${CEPH_FIXTURE_OSDS:-1}
osd_bytes=${CEPH_FIXTURE_OSD_BYTES:-1073741824}
image_size=${CEPH_FIXTURE_IMAGE_SIZE:-256M}
object_size=${CEPH_FIXTURE_OBJECT_SIZE:-4M}
features=${CEPH_FIXTURE_FEATURES:-layering}
pool=rbd
image=img
up_wait=60      # seconds to wait for a daemon

usage() {
	sed -n '4,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'
}

die() { echo "$prog: $*" >&2; exit 1; }
cannot() { echo "$prog: cannot run Ceph here: $*" >&2; exit 77; }
bad_usage() { echo "$prog: $*" >&2; exit 2; }

# check: every program the fixture needs is installed.
check() {
	local t
	for t in ceph-mon ceph-osd ceph rbd uuidgen python3; do
		command -v "$t" >/dev/null 2>&1 || cannot "$t is not installed (Debian: ceph-mon, ceph-osd, ceph-common, uuid-runtime)"
	done
}

# A TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# ceph_cmd ARGS...: the ceph CLI against the fixture, bounded in time.
ceph_cmd() { timeout 30 ceph -c "$dir/ceph.conf" --connect-timeout 10 "$@"; }

write_conf() {
	local port=$1 fsid=$2
	cat >"$dir/ceph.conf" <<EOF
# one-node test cluster made by $prog; removed by "$prog stop $dir"
[global]
fsid = $fsid
mon host = 127.0.0.1:$port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
keyring = $dir/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
ms bind ipv6 = false
[mon]
mon data = $dir/mon.\$id
admin socket = $dir/run/\$name.asok
[mon.a]
mon addr = 127.0.0.1:$port
[osd]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
osd data = $dir/osd.\$id
admin socket = $dir/run/\$name.asok
osd objectstore = memstore
memstore device bytes = $osd_bytes
osd fast shutdown = false
osd op num shards = 1
osd op num threads per shard = 2
EOF
}

# wait_up N: until N OSDs are up (bounded).
wait_osds_up() {
	local want=$1 i
	for i in $(seq $((up_wait * 5))); do
		ceph_cmd osd stat 2>/dev/null | grep -q "$want up" && return 0
		sleep 0.2
	done
	return 1
}

log_tail() { tail -n 15 "$1" 2>/dev/null | sed 's/^/    /' >&2; }

start_osd() {
	local id=$1
	ceph-osd -c "$dir/ceph.conf" -i "$id" 2>>"$dir/log/osd.$id.err" ||
		{ log_tail "$dir/log/osd.$id.log"; return 1; }
}

start() {
	local port fsid i uuid
	check
	case $nr_osds in 1|2|3) ;; *) bad_usage "CEPH_FIXTURE_OSDS: $nr_osds is not 1, 2 or 3" ;; esac
	dir=${1:-}
	if [ -z "$dir" ]; then
		dir=$(mktemp -d /tmp/ceph-fixture.XXXXXX) || die "mktemp failed"
	else
		mkdir -p "$dir" || die "cannot make $dir"
		dir=$(cd "$dir" && pwd)
	fi
	mkdir -p "$dir/run" "$dir/log" "$dir/mon.a"
	port=$(free_port) || die "no free port"
	fsid=$(uuidgen)
	write_conf "$port" "$fsid"

	ceph-mon -c "$dir/ceph.conf" --mkfs -i a --fsid "$fsid" >"$dir/log/mon.mkfs" 2>&1 ||
		{ log_tail "$dir/log/mon.mkfs"; stop_quiet; cannot "ceph-mon --mkfs failed"; }
	ceph-mon -c "$dir/ceph.conf" -i a >"$dir/log/mon.a.err" 2>&1 ||
		{ log_tail "$dir/log/mon.a.log"; stop_quiet; cannot "ceph-mon did not start"; }
	ceph_cmd mon stat >/dev/null 2>&1 ||
		{ log_tail "$dir/log/mon.a.log"; stop_quiet; cannot "the monitor does not answer on 127.0.0.1:$port"; }

	for i in $(seq 0 $((nr_osds - 1))); do
		uuid=$(uuidgen)
		mkdir -p "$dir/osd.$i"
		[ "$(ceph_cmd osd new "$uuid" 2>>"$dir/log/osd.$i.err")" = "$i" ] ||
			{ stop_quiet; cannot "ceph osd new did not give id $i"; }
		ceph-osd -c "$dir/ceph.conf" -i "$i" --mkfs --osd-uuid "$uuid" >"$dir/log/osd.$i.mkfs" 2>&1 ||
			{ log_tail "$dir/log/osd.$i.mkfs"; stop_quiet; cannot "ceph-osd --mkfs failed"; }
		start_osd "$i" || { stop_quiet; cannot "ceph-osd.$i did not start"; }
	done
	wait_osds_up "$nr_osds" ||
		{ log_tail "$dir/log/osd.0.log"; stop_quiet; cannot "the OSDs did not come up within ${up_wait}s"; }

	ceph_cmd osd pool create "$pool" 8 8 >/dev/null 2>&1 &&
		ceph_cmd osd pool application enable "$pool" rbd >/dev/null 2>&1 ||
		{ stop_quiet; die "cannot create pool $pool"; }
	timeout 60 rbd -c "$dir/ceph.conf" create --size "$image_size" --object-size "$object_size" \
		--image-feature "$features" "$pool/$image" >"$dir/log/rbd-create.err" 2>&1 ||
		{ log_tail "$dir/log/rbd-create.err"; stop_quiet; die "cannot create image $pool/$image"; }
	env_lines
}

env_lines() {
	cat <<EOF
CEPH_CONF=$dir/ceph.conf; export CEPH_CONF
CEPH_FIXTURE_DIR=$dir; export CEPH_FIXTURE_DIR
RBD_POOL=$pool; export RBD_POOL
RBD_IMAGE=$image; export RBD_IMAGE
RBD_SPEC=$pool/$image; export RBD_SPEC
EOF
}

# alive PID: the process exists and is not a zombie waiting for its reaper.
alive() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[ "${st%% *}" != Z ]
}

# kill_wait PIDFILE: SIGTERM, up to 5 s, then SIGKILL.  Only the process
# whose pid the daemon wrote itself is signalled.
kill_wait() {
	local pid i
	[ -f "$1" ] || return 0
	pid=$(cat "$1" 2>/dev/null)
	[ -n "$pid" ] || return 0
	alive "$pid" && kill -TERM "$pid" 2>/dev/null || { rm -f "$1"; return 0; }
	for i in $(seq 50); do
		alive "$pid" || break
		sleep 0.1
	done
	alive "$pid" && kill -KILL "$pid" 2>/dev/null
	for i in $(seq 50); do
		alive "$pid" || break
		sleep 0.1
	done
	rm -f "$1"
}

stop_quiet() {
	local f
	[ -n "${dir:-}" ] && [ -d "$dir" ] || return 0
	# everything is thrown away: no clean shutdown needed (OSDs first)
	for f in "$dir"/run/osd.*.pid "$dir/run/mon.a.pid"; do
		[ -e "$f" ] || continue
		kill -KILL "$(cat "$f")" 2>/dev/null
		kill_wait "$f"
	done
	case $dir in
	/tmp/*|/var/tmp/*) rm -rf "$dir" ;;
	*) [ -f "$dir/ceph.conf" ] && grep -q "made by $prog" "$dir/ceph.conf" && rm -rf "$dir" ;;
	esac
}

need_dir() {
	dir=${1:-${CEPH_FIXTURE_DIR:-}}
	[ -n "$dir" ] || bad_usage "DIR: missing (or set CEPH_FIXTURE_DIR)"
	[ -f "$dir/ceph.conf" ] || bad_usage "$dir: no fixture there (no ceph.conf)"
}

osd_id() {
	case ${1:-} in [0-2]) ;; *) bad_usage "ID: '${1:-}' is not an OSD id (0..2)" ;; esac
}

case ${1:-} in
-h|--help)
	usage
	;;
check)
	check
	;;
start)
	[ $# -le 2 ] || bad_usage "start: at most one DIR"
	start "${2:-}"
	;;
stop)
	[ $# -le 2 ] || bad_usage "stop: at most one DIR"
	need_dir "${2:-}"
	stop_quiet
	;;
osd-stop)
	need_dir "${2:-}"
	osd_id "${3:-}"
	kill_wait "$dir/run/osd.$3.pid"
	;;
osd-start)
	need_dir "${2:-}"
	osd_id "${3:-}"
	n=$(ceph_cmd osd ls 2>/dev/null | wc -l)
	start_osd "$3" || die "osd.$3 did not start"
	wait_osds_up "$n" || die "osd.$3 did not come up within ${up_wait}s"
	;;
run)
	shift
	[ "${1:-}" = "--" ] && shift
	[ $# -ge 1 ] || bad_usage "run: CMD missing"
	envs=$(start) || exit $?
	eval "$envs"
	dir=$CEPH_FIXTURE_DIR
	trap 'stop_quiet' EXIT
	trap 'exit 130' INT TERM
	"$@"
	rc=$?
	exit $rc
	;;
"")
	bad_usage "a mode is missing: start, stop, run, osd-stop, osd-start, check (--help)"
	;;
*)
	bad_usage "$1: unknown mode (start, stop, run, osd-stop, osd-start, check)"
	;;
esac
