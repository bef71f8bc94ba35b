#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# A soak: for RQ_SOAK_SECONDS (default 20; CI keeps it at most 60), good
# clients write and verify their data (raw-socket clients, and libnbd when
# python3-libnbd is there) while abusive ones connect and stay silent,
# trickle, pipeline reads they never take, send junk and vanish
# mid-payload.  Asserted: no good operation fails or reads wrong data;
# the server's RSS stays under RQ_SOAK_RSS_MIB (default 256: idle, the
# 64 MiB buffer budget, the connections' fixed cost; more under ASan);
# its CPU time stays under two cores; afterwards it is quiet (under 0.5 s
# of CPU in 2 s) and serves.  Build with -Db_sanitize=address to run it
# under ASan (the sanitizer's report fails the stop).
#
# usage: nbd_soak.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3
nbd_init "$1"
ulimit -n 4096 2>/dev/null
secs=${RQ_SOAK_SECONDS:-20}
bound=${RQ_SOAK_RSS_MIB:-256}
nbd_start --memory 64M --handshake-timeout 3 --stall-timeout 2 --min-rate 64K \
	--conn-buffer 4M --buffer-total 64M
python3 "$(dirname "$0")/nbd_abuse.py" soak "$sock" "$nbd_pid" "$secs" "$uri" "$bound" ||
	fail "soak"
nbd_stop
grep -q "ERROR: AddressSanitizer\|runtime error" "$nbd_log" && fail "sanitizer report"
tail -1 "$nbd_log"
echo "ok: soak of $secs s"
