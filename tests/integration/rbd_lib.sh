# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Shared by the rbd_*.sh integration tests (sourced, not run): a one-node
# Ceph cluster from scripts/ceph-fixture.sh for the length of one test, and
# rqnbd --rbd over its image (through nbd_lib.sh).  A machine that cannot
# run the Ceph daemons skips (77) with the fixture's reason.
#
#   rbd_init RQNBD FIXTURE   nbd_init, then start the cluster ($CEPH_CONF,
#                            $RBD_SPEC, $CEPH_FIXTURE_DIR); the exit trap
#                            stops rqnbd and the cluster whatever happens
#   rbd_start ARGS...        nbd_start --rbd $RBD_SPEC --ceph-conf $CEPH_CONF ARGS...
#   osd_ops [r|w]            the OSD's completed op count (perf dump "op_r"/"op_w")
#   rbd_export FILE          the image read by another client (rbd export)
. "$(dirname "$0")/nbd_lib.sh"

fixture=""
bg_pids=""   # background clients a test started: killed on exit

# Clients first, then the cluster (its pid files are under $tmp, which
# nbd_cleanup removes: stopping it after that would leave the daemons).
rbd_cleanup() {
	local p
	for p in $bg_pids; do kill -9 "$p" 2>/dev/null; done
	if [ -n "$nbd_pid" ]; then
		kill -9 "$nbd_pid" 2>/dev/null
		wait "$nbd_pid" 2>/dev/null
		nbd_pid=""
	fi
	[ -n "${CEPH_FIXTURE_DIR:-}" ] && "$fixture" stop "$CEPH_FIXTURE_DIR" >/dev/null 2>&1
	nbd_cleanup
}

rbd_init() {
	nbd_init "$1"
	[ -x "$2" ] || fail "no fixture at $2"
	fixture=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
	trap rbd_cleanup EXIT
	local envs rc
	envs=$("$fixture" start "$tmp/ceph" 2>"$tmp/fixture.err")
	rc=$?
	[ $rc = 77 ] && skip "$(tail -n 1 "$tmp/fixture.err")"
	[ $rc = 0 ] || { cat "$tmp/fixture.err"; fail "the Ceph fixture did not start ($rc)"; }
	eval "$envs"
}

rbd_start() {
	nbd_start --rbd "$RBD_SPEC" --ceph-conf "$CEPH_CONF" "$@"
}

osd_ops() {
	timeout 20 ceph --admin-daemon "$CEPH_FIXTURE_DIR/run/osd.0.asok" perf dump 2>/dev/null |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["osd"]["op_'"$1"'"])'
}

rbd_export() {
	rm -f "$1"
	timeout 60 rbd -c "$CEPH_CONF" export --no-progress "$RBD_SPEC" "$1" >/dev/null 2>&1
}
