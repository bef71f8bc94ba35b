#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# No death by signal.  rqnbd serves a 16 MiB file under ulimit -f 2048
# (2 MiB): a write at 3 MiB fails with NBD ENOSPC (the kernel's EFBIG;
# before: SIGXFSZ killed the server), writes below still work, and the
# server stops cleanly.  A client that vanishes with replies in flight
# (SIGPIPE) does not kill it either.
#
# usage: nbd_signals.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3
nbd_init "$1"

truncate -s 16M "$tmp/disk.img"
real=$rqnbd
printf '#!/bin/sh\nulimit -f 2048 || exit 1\nexec "%s" "$@"\n' "$real" >"$tmp/limited"
chmod +x "$tmp/limited"
rqnbd=$tmp/limited
nbd_start --file "$tmp/disk.img"
$abuse xfsz "$sock" "$nbd_pid" $((2 << 20)) || fail "SIGXFSZ"
$abuse memory "$sock" "$nbd_pid" 4 16 $((1 << 20)) 200 200 || fail "vanishing readers"
kill -0 "$nbd_pid" || fail "rqnbd died"
nbd_stop
echo "ok: alive after EFBIG and vanished clients"
