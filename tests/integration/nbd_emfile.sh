#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Out of descriptors, no busy loop.  rqnbd runs under ulimit -n 64;
# silent clients take every descriptor, 50 more wait in the backlog.
# Over 3 s (with ulimit -n 64, then 65) the server uses under a quarter of a core (before: a full core,
# accept failing with EMFILE in a loop), logs the condition rate-limited,
# and serves a good client once the flood has left.
#
# usage: nbd_emfile.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3
nbd_init "$1"
ulimit -n 4096 2>/dev/null

real=$rqnbd
printf '#!/bin/sh\nulimit -n "$RQ_NOFILE" || exit 1\nexec "%s" "$@"\n' "$real" >"$tmp/limited"
chmod +x "$tmp/limited"
rqnbd=$tmp/limited
# 64 and 65: whichever descriptor runs out first, the accepted socket or
# the connection's eventfd, both paths are taken
for RQ_NOFILE in 64 65; do
	export RQ_NOFILE
	: >"$nbd_log"
	nbd_start --memory 16M
	$abuse emfile "$sock" "$nbd_pid" 50 3 || fail "EMFILE (ulimit -n $RQ_NOFILE)"
	nbd_stop
	n=$(grep -c "out of file descriptors\|Too many open files" "$nbd_log")
	[ "$n" -ge 1 ] || fail "running out of descriptors was not logged"
	[ "$n" -le 10 ] || fail "$n lines about descriptors: not rate-limited"
	grep -q "fewer than 2 per connection" "$nbd_log" || fail "no warning about ulimit -n"
	grep -q "out of file descriptors" "$nbd_log" && accept_emfile=1
done
[ -n "${accept_emfile:-}" ] || fail "accept never failed with EMFILE: that path is not tested"
echo "ok: no spin at EMFILE ($n log lines)"
