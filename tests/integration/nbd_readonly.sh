#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd --read-only: the export says READ_ONLY; reads and flushes work;
# writes, trims and write-zeroes fail with EPERM from the server (checked
# with a raw client, and with nbdsh with libnbd's client-side checks
# turned off); the data does not change.  Once on each front end (mq, sq).
#
# usage: nbd_readonly.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3 truncate
nbd_init "$1"
rawnbd

head -c 4M /dev/urandom >"$tmp/disk.img"
cp "$tmp/disk.img" "$tmp/orig.img"

cat >"$tmp/ro.py" <<'PY'
# SPDX-License-Identifier: LGPL-2.1-or-later
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rawnbd import *
orig = open(sys.argv[2], "rb").read()
bad = []
for structured in (False, True):
    c = Conn(sys.argv[1]); c.greet()
    size, flags = c.go(structured=structured)
    if size != len(orig) or not flags & FLAG_READ_ONLY:
        bad.append("size/READ_ONLY flag")
    for name, typ, ln, payload in (("write", CMD_WRITE, 4096, b"x" * 4096),
                                   ("trim", CMD_TRIM, 4096, b""),
                                   ("write-zeroes", CMD_ZERO, 4096, b"")):
        err = c.cmd(typ, 0, ln, payload=payload)[0]
        if err != EPERM:
            bad.append("%s: error %d, not EPERM" % (name, err))
    if c.cmd(CMD_FLUSH)[0] != 0:
        bad.append("flush failed")
    err, data = c.cmd(CMD_READ, 0, 65536)
    if err or data != orig[:65536]:
        bad.append("read failed")
    c.request(CMD_DISC)
print(bad or "raw client: EPERM for write, trim, zero; reads fine")
sys.exit(1 if bad else 0)
PY
# nbdsh runs the python3 first on PATH, which may lack the nbd module
nbdsh=""
if nbdsh --version >/dev/null 2>&1; then
	nbdsh=nbdsh
elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -m nbd --version >/dev/null 2>&1; then
	nbdsh="/usr/bin/python3 -m nbd"
fi
nbdsh_check='
import errno
assert h.is_read_only()
h.set_strict_mode(0)   # let the server, not libnbd, refuse
for what, fn in (("pwrite", lambda: h.pwrite(b"a" * 4096, 0)),
                 ("trim", lambda: h.trim(4096, 0)),
                 ("zero", lambda: h.zero(4096, 0))):
    try:
        fn()
        raise SystemExit(what + " succeeded on a read-only export")
    except nbd.Error as e:
        assert e.errnum == errno.EPERM, (what, e)
assert len(h.pread(4096, 0)) == 4096
print("nbdsh: EPERM for pwrite, trim, zero")
'
[ -n "$nbdsh" ] || echo "nbdsh not installed (python3-libnbd): raw client only"

for front in mq sq; do
	nbd_start --front "$front" --file "$tmp/disk.img" --read-only
	timeout 60 python3 "$tmp/ro.py" "$sock" "$tmp/orig.img" ||
		fail "read-only export misbehaves ($front)"
	if [ -n "$nbdsh" ]; then
		timeout 60 $nbdsh -u "$uri" -c "$nbdsh_check" || fail "nbdsh checks failed ($front)"
	fi
	nbd_stop
	cmp "$tmp/disk.img" "$tmp/orig.img" || fail "the read-only file changed ($front)"
	echo "front end $front: read-only holds"
done
echo PASS
