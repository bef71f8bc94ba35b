#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Idle and slow clients cannot lock good ones out.
#  1. 256 connections that never speak and 256 that trickle a byte a
#     second, renewed as the server closes them: a good client (write,
#     read back) is served 20 times throughout, each within 5 s (before:
#     locked out for the 30 s handshake timeout, or for ever).  An established
#     client idle since before the flood keeps its connection (handshakes
#     are evicted first).
#  2. Deadlines: a handshake trickled a byte a second ends at
#     --handshake-timeout, a request header trickled in transmission at
#     the --min-rate check, an idle connection at --idle-timeout.
#  3. Per client (TCP, source addresses 127.0.0.1 and 127.0.0.2):
#     --max-per-client caps one address (refused with --reserve 0, its
#     idlest connection closed otherwise) while another address is served.
#
# usage: nbd_lockout.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3
nbd_init "$1"
ulimit -n 4096 2>/dev/null

nbd_start --memory 64M
$abuse lockout "$sock" "$nbd_pid" 256 256 20 5 || fail "lockout by a flood"
nbd_stop
grep -q "more idle connections closed for new ones\|closed .* idle connection" "$nbd_log" ||
	fail "evictions were not logged"

nbd_start --memory 64M --handshake-timeout 3 --stall-timeout 2 --min-rate 1K --idle-timeout 3
$abuse deadlines "$sock" 12 || fail "deadlines"
nbd_stop

# TCP on a free port, for source addresses
tcp_start() {
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$rqnbd" --port "$port" --memory 16M "$@" 2>>"$nbd_log" &
	nbd_pid=$!
	for _ in $(seq 100); do
		python3 -c "import socket; socket.create_connection(('127.0.0.1',$port)).close()" \
			2>/dev/null && return 0
		sleep 0.05
	done
	fail "rqnbd did not listen on port $port"
}
tcp_stop() {
	kill -TERM "$nbd_pid"; wait "$nbd_pid" || fail "rqnbd exit status $?"; nbd_pid=""
}
tcp_start --max-per-client 4 --reserve 0
$abuse per-client 127.0.0.1 "$port" 4 refuse || fail "per-client limit, refusing"
tcp_stop
grep -q "refused a connection from 127.0.0.1: its connection limit" "$nbd_log" ||
	fail "the refusal was not logged with its reason"
tcp_start --max-per-client 4 --reserve 4
$abuse per-client 127.0.0.1 "$port" 4 evict || fail "per-client limit, evicting"
tcp_stop
echo "ok: no lockout"
