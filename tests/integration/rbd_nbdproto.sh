#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The protocol features of rqnbd --rbd (issue 14) against a one-node Ceph
# cluster (scripts/ceph-fixture.sh): block status reports every byte as
# data (librbd's diff is not asked on the connection's thread), a fast zero
# is refused with NBD_ENOTSUP and leaves the data (librbd may write zeros),
# a plain write-zeroes still zeroes, CACHE is a read ahead through the
# queue (the OSD counts the reads), and nbdinfo lists can_cache,
# can_fast_zero and base:allocation.
#
# usage: rbd_nbdproto.sh RQNBD FIXTURE   Skips (77) when the cluster cannot
# start or a client is missing.
set -u
. "$(dirname "$0")/rbd_lib.sh"
need python3 nbdinfo
rbd_init "$1" "$2"
rawnbd

rbd_start
nbdinfo --json --no-content "$uri" >"$tmp/info" || fail "nbdinfo"
for cap in '"can_cache": true' '"can_fast_zero": true' '"base:allocation"'; do
	grep -q "$cap" "$tmp/info" || fail "nbdinfo --rbd: no $cap"
done
cat >"$tmp/rbdproto.py" <<'PY'
# SPDX-License-Identifier: LGPL-2.1-or-later
import os, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rawnbd import *

c = Conn(sys.argv[1])
cache_only = len(sys.argv) > 2
c.greet()
c.opt(OPT_SR)
c.replies()
c.structured = True
ctx, typ = c.meta(OPT_SET_META, [b"base:allocation"])
check(typ == REP_ACK and ctx == [(1, b"base:allocation")], "SET_META_CONTEXT")
size, _ = c.go()
if cache_only:
    check(c.cmd(CMD_CACHE, 16 * M, 4 * M)[0] == 0, "cache 4 MiB")
    c.request(CMD_DISC)
    finish("rbd cache")
    sys.exit(0)
err, _ = c.cmd(CMD_BS, 0, 8 * M)
check(err == 0 and c.extents == [(1, [(8 * M, 0)])], "rbd: all data (%s)" % c.extents)
check(c.cmd(CMD_WRITE, M, 4096, payload=b"\x42" * 4096)[0] == 0, "write")
check(c.cmd(CMD_ZERO, M, 4096, FLAG_FAST_ZERO)[0] == ENOTSUP, "rbd fast zero: ENOTSUP")
check(c.cmd(CMD_READ, M, 4096)[1] == b"\x42" * 4096, "ENOTSUP left the data")
check(c.cmd(CMD_ZERO, M, 4096)[0] == 0, "plain write-zeroes")
check(c.cmd(CMD_READ, M, 4096)[1] == b"\0" * 4096, "zeroed")
check(c.cmd(CMD_CACHE, size - 4096, 8192)[0] == EINVAL, "cache past the end")
c.request(CMD_DISC)
finish("rbd protocol features")
PY
timeout 120 python3 "$tmp/rbdproto.py" "$sock" || fail "rbd block status, fast zero, cache"
# a CACHE request, alone: the driver counts its read (two reads above)
timeout 120 python3 "$tmp/rbdproto.py" "$sock" cache || fail "rbd cache"
nbd_stop
n=$(sed -n 's/.*requests: \([0-9]*\) reads.*/\1/p' "$nbd_log" | tail -1)
[ "${n:-0}" = 3 ] || fail "the driver saw ${n:-no} reads, not 2 + the CACHE read ahead"
echo "ok: rbd block status (all data), fast zero refused, cache reads ahead"
