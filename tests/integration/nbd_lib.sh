# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Shared by the nbd_*.sh integration tests (sourced, not run): start and stop
# rqnbd on a unix socket in a private temporary directory, skip (77) when a
# client tool is missing, bound everything in time.  Every test kills its
# server on exit, whatever happens.
#
#   nbd_init RQNBD      check the binary, make $tmp, install the exit trap
#   nbd_start ARGS...   start rqnbd --unix $sock ARGS..., wait for the socket
#   nbd_stop            SIGTERM, wait (bounded), check exit status 0
#   need TOOL...        skip unless every TOOL is on PATH
#   rawnbd              put rawnbd.py (a minimal NBD client in python3) in $tmp
#   nbd NAME CODE       (after rawnbd) run python3 CODE with c, a connection
#                       to export NAME after NBD_OPT_GO
#   go_error NAME       (after rawnbd) "ok" or the NBD_REP_ERR_* (hex) a GO of NAME gets
#   wait_log PATTERN    until rqnbd's log has a line matching PATTERN (20 s)
#   $abuse              python3 nbd_abuse.py: hostile clients (see that file)
#   $uri                nbd+unix:///?socket=$sock

nbd_pid=""
nbd_log=""
nbd_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
abuse="python3 $nbd_dir/nbd_abuse.py"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; [ -n "$nbd_log" ] && [ -f "$nbd_log" ] && sed 's/^/rqnbd: /' "$nbd_log"; exit 1; }
need() { for t in "$@"; do command -v "$t" >/dev/null 2>&1 || skip "$t is not installed"; done; }

nbd_cleanup() {
	if [ -n "$nbd_pid" ]; then
		kill -9 "$nbd_pid" 2>/dev/null
		wait "$nbd_pid" 2>/dev/null
	fi
	[ -n "${tmp:-}" ] && rm -rf "$tmp"
}

nbd_init() {
	[ -x "$1" ] || { echo "FAIL: no rqnbd at $1"; exit 1; }
	rqnbd=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
	tmp=$(mktemp -d /tmp/rqnbd-test.XXXXXX)
	sock=$tmp/sock
	uri="nbd+unix:///?socket=$sock"
	nbd_log=$tmp/rqnbd.log
	trap nbd_cleanup EXIT
	trap 'exit 1' INT TERM
}

nbd_start() {
	rm -f "$sock"
	"$rqnbd" --unix "$sock" "$@" 2>>"$nbd_log" &
	nbd_pid=$!
	for _ in $(seq 100); do
		[ -S "$sock" ] && return 0
		kill -0 "$nbd_pid" 2>/dev/null || break
		sleep 0.05
	done
	fail "rqnbd did not start ($*)"
}

# nbd_stop: SIGTERM must drain, flush and exit 0 within 20 s.
nbd_stop() {
	local rc
	[ -n "$nbd_pid" ] || return 0
	kill -TERM "$nbd_pid"
	for _ in $(seq 200); do
		kill -0 "$nbd_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$nbd_pid" 2>/dev/null; then
		kill -9 "$nbd_pid"
		wait "$nbd_pid" 2>/dev/null
		nbd_pid=""
		fail "rqnbd did not stop within 20 s of SIGTERM"
	fi
	wait "$nbd_pid"
	rc=$?
	nbd_pid=""
	[ $rc = 0 ] || fail "rqnbd exited with $rc after SIGTERM"
	[ -e "$sock" ] && fail "rqnbd left its socket behind"
	return 0
}

# wait_log PATTERN: until the server's log has a line matching PATTERN (20 s)
wait_log() {
	for _ in $(seq 200); do
		grep -qE "$1" "$nbd_log" && return 0
		sleep 0.1
	done
	fail "no line matching '$1' in rqnbd's log within 20 s"
}

# go_error NAME: what NBD_OPT_GO of export NAME gets, "ok" or the
# NBD_REP_ERR_* in hex (after rawnbd)
go_error() {
	python3 -c "import sys; sys.path.insert(0, '$tmp'); import rawnbd, struct
c = rawnbd.Conn('$sock'); c.greet()
c.opt(rawnbd.OPT_GO, struct.pack('>I', len(b'$1')) + b'$1' + struct.pack('>H', 0))
r = c.replies()[-1][0]
print('ok' if r == rawnbd.REP_ACK else '%x' % r)"
}

# nbd NAME CODE: python3 with c, a connection to export NAME (after GO;
# after rawnbd)
nbd() {
	python3 -c "import sys; sys.path.insert(0, '$tmp'); import rawnbd
c = rawnbd.Conn('$sock'); c.greet(); c.go(b'$1')
$2"
}

# rawnbd: a small NBD client that can also misbehave (python3 stdlib only),
# tests/integration/rawnbd.py, copied next to the test's own scripts.
rawnbd() {
	cp "$nbd_dir/rawnbd.py" "$tmp/rawnbd.py"
}
