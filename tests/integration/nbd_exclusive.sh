#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# One server per file and per socket, and privileges dropped.
#  - a second rqnbd on a file a writable one serves is refused (exit 1,
#    "in use"), read-only or not; two read-only ones share it; a writer is
#    refused while a reader holds it; --lock off serves it anyway.
#  - a block device (a loop device, when root can make one) is opened
#    O_EXCL: a second server on it is refused.
#  - --unix on a socket a live server listens on is refused, and that
#    server stays reachable; a stale socket (its server killed) is replaced.
#  - --user nobody (as root): the server runs as nobody after binding,
#    without supplementary groups, and can still remove its socket at exit
#    (it owns it).
#
# usage: nbd_exclusive.sh RQNBD    Skips (77) without python3 or nbdinfo.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3 nbdinfo
nbd_init "$1"
img=$tmp/disk.img
truncate -s 8M "$img"

# second: run a second server that must be refused (exit 1, reason $1).
second() {
	local why=$1 rc
	shift
	timeout 10 "$rqnbd" --unix "$tmp/sock2" "$@" 2>"$tmp/second.err"
	rc=$?
	[ $rc = 1 ] || fail "second server ($*): exit $rc, not 1: $(cat "$tmp/second.err")"
	grep -q "$why" "$tmp/second.err" || fail "second server ($*): $(cat "$tmp/second.err")"
}
# alongside: a second server that must start (then stopped).
alongside() {
	"$rqnbd" --unix "$tmp/sock2" "$@" 2>"$tmp/second.err" &
	local p=$!
	for _ in $(seq 100); do [ -S "$tmp/sock2" ] && break; sleep 0.05; done
	[ -S "$tmp/sock2" ] || fail "second server ($*) did not start: $(cat "$tmp/second.err")"
	kill "$p"; wait "$p"
}

nbd_start --file "$img"
second "in use" --file "$img"
second "in use" --file "$img" --read-only
alongside --file "$img" --lock off
nbdinfo --size "$uri" >/dev/null || fail "the first server is not served any more"
nbd_stop
echo "file: a second server refused, --lock off allowed"

nbd_start --file "$img" --read-only
alongside --file "$img" --read-only
second "in use" --file "$img"
nbd_stop
echo "file: readers share, a writer is refused"

if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null && loop=$(losetup -f --show "$img" 2>/dev/null); then
	trap 'losetup -d "$loop"; nbd_cleanup' EXIT
	nbd_start --file "$loop"
	second "in use" --file "$loop" --lock shared
	nbd_stop
	echo "block device $loop: a second server refused"
else
	echo "(no loop device: block device case not run)"
fi

nbd_start --memory 16M
second "listening on it already" --memory 16M --unix "$sock"
[ -S "$sock" ] || fail "the refused server removed the live socket"
nbdinfo --size "$uri" >/dev/null || fail "the first server is unreachable"
kill -9 "$nbd_pid"; wait "$nbd_pid" 2>/dev/null; nbd_pid=""
[ -S "$sock" ] || fail "no stale socket left by kill -9 (test setup)"
"$rqnbd" --unix "$sock" --memory 16M 2>>"$nbd_log" &   # not nbd_start: it removes the socket
nbd_pid=$!
for _ in $(seq 100); do nbdinfo --size "$uri" >/dev/null 2>&1 && break; sleep 0.05; done
nbdinfo --size "$uri" >/dev/null || fail "a stale socket was not replaced"
nbd_stop
echo "socket: a live one refused, a stale one replaced"

if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
	chmod 1777 "$tmp"
	before=$(grep -c "rqnbd: serving" "$nbd_log")
	nbd_start --memory 16M --user nobody
	want=$(id -u nobody)
	# the socket appears before the drop: wait for the banner, printed after
	for _ in $(seq 100); do
		[ "$(grep -c "rqnbd: serving" "$nbd_log")" -gt "$before" ] && break
		sleep 0.05
	done
	uid=$(awk '/^Uid:/ { print $2 $3 $4 $5 }' "/proc/$nbd_pid/status")
	[ "$uid" = "$want$want$want$want" ] || fail "running as uid $uid, not nobody"
	[ "$(awk '/^Groups:/ { print $2 }' "/proc/$nbd_pid/status")" = "" ] ||
		fail "supplementary groups kept"
	$abuse roundtrip "$sock" || fail "not served after dropping privileges"
	nbd_stop
	echo "--user nobody: runs as uid $want, serves"
	"$rqnbd" --unix "$tmp/sock3" --memory 1M --user no-such-user-here 2>"$tmp/u.err"
	[ $? = 1 ] && grep -q "no such user" "$tmp/u.err" || fail "unknown user accepted"
else
	echo "(not root: --user not run)"
fi
echo "ok: exclusive access"
