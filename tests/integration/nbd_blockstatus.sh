#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Block status (base:allocation), CACHE and fast zero.
#
# Memory: the map is "hole,zero" where no page was written or a trim or a
# write-zeroes freed it, data where a write put something; checked with a
# raw client (every descriptor, REQ_ONE, the descriptor cap, errors) and
# with nbdinfo --map.  A sparse file: the map equals what SEEK_DATA /
# SEEK_HOLE says of the file, through a raw client and nbdinfo --map.  Meta
# context negotiation: LIST for no query, "base:" and the full name, SET,
# errors for malformed bodies, unknown exports, no structured replies.
# Malformed BLOCK_STATUS requests get EINVAL and the connection goes on.
# CACHE succeeds (a read ahead on memory, fadvise on a file), fails with
# EINVAL past the end.  NBD_CMD_FLAG_FAST_ZERO: memory zeroes fast; a
# file does when its file system punches holes (probed here with
# fallocate -p), else NBD_ENOTSUP with the data untouched.
#
# usage: nbd_blockstatus.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3
nbd_init "$1"
rawnbd
have_nbdinfo=0
command -v nbdinfo >/dev/null && have_nbdinfo=1

cat >"$tmp/bs.py" <<'PY'
# SPDX-License-Identifier: LGPL-2.1-or-later
import os, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rawnbd import *

def connect(path, meta=True):
    c = Conn(path)
    c.greet()
    c.opt(OPT_SR)
    assert c.replies()[-1][0] == REP_ACK
    c.structured = True
    if meta:
        ctx, typ = c.meta(OPT_SET_META, [b"base:allocation"])
        check(typ == REP_ACK and ctx == [(1, b"base:allocation")], "SET_META_CONTEXT")
    c.opt(OPT_GO, struct.pack(">I", 0) + struct.pack(">H", 0))
    size = flags = None
    for typ, data in c.replies():
        if typ == REP_INFO and struct.unpack(">H", data[:2])[0] == 0:
            size, flags = struct.unpack(">QH", data[2:12])
    return c, size, flags


def bs(c, off, length, flags=0):
    err, _ = c.cmd(CMD_BS, off, length, flags)
    if err:
        return err, []
    check(len(c.extents) == 1 and c.extents[0][0] == 1, "one chunk, context id 1")
    return 0, c.extents[0][1] if c.extents else []


def full_map(c, off, length):
    """The map of [off, off+length) from as many requests as it takes,
    adjacent descriptors of one state merged."""
    out, pos, end = [], off, off + length
    while pos < end:
        err, d = bs(c, pos, min(end - pos, 0xFFFFFE00))
        check(err == 0 and d, "block status at %d: %d" % (pos, err))
        if err or not d:
            break
        check(sum(n for n, _ in d) <= end - pos, "no more than asked at %d" % pos)
        for n, f in d:
            check(n and n % 512 == 0 or pos + n == end, "descriptor length %d" % n)
            if out and out[-1][1] == f:
                out[-1] = (out[-1][0] + n, f)
            else:
                out.append((n, f))
            pos += n
    return out


def memory(path):
    size = 64 * M
    # negotiation
    c = Conn(path)
    c.greet()
    check(c.meta(OPT_LIST_META, [])[1] == ERR_INVALID, "LIST_META without SR: ERR_INVALID")
    c.opt(OPT_SR)
    c.replies()
    both = [(1, b"base:allocation")]
    check(c.meta(OPT_LIST_META, []) == (both, REP_ACK), "LIST_META, no query: base:allocation")
    check(c.meta(OPT_LIST_META, [b"base:"]) == (both, REP_ACK), "LIST_META base:")
    check(c.meta(OPT_LIST_META, [b"base:allocation"]) == (both, REP_ACK), "LIST_META full name")
    check(c.meta(OPT_LIST_META, [b"qemu:dirty-bitmap:x"]) == ([], REP_ACK), "LIST_META other")
    check(c.meta(OPT_SET_META, [b"base:"]) == ([], REP_ACK), "SET_META base: selects nothing")
    check(c.meta(OPT_LIST_META, [], b"nosuch") == ([], ERR_UNKNOWN), "LIST_META unknown export")
    for body, what in ((b"\0\0\0\5ab", "name past the end"),
                       (b"\0\0\0\0\0\0\0\1\0\0\1\0ab", "query past the end"),
                       (b"\0\0\0\0\0\0\0\0xyz", "trailing bytes"),
                       (b"\0\0\0\0\xff\xff\xff\xff", "absurd count"),
                       (b"\0\0", "short")):
        c.opt(OPT_LIST_META, body)
        check(c.replies()[-1][0] == ERR_INVALID, "LIST_META " + what + ": ERR_INVALID")
    c.opt(OPT_ABORT)
    c.replies()

    # no context selected: BLOCK_STATUS is EINVAL
    c, _, flags = connect(path, meta=False)
    check(c.cmd(CMD_BS, 0, 4096)[0] == EINVAL, "BLOCK_STATUS without context: EINVAL")
    check(flags & FLAG_SEND_CACHE and flags & FLAG_SEND_FAST_ZERO, "CACHE, FAST_ZERO advertised")

    c, got, _ = connect(path)
    check(got == size, "size")
    check(full_map(c, 0, size) == [(size, 3)], "fresh memory: all hole,zero")
    check(c.cmd(CMD_WRITE, 1 * M, 4096, payload=b"\1" * 4096)[0] == 0, "write")
    check(c.cmd(CMD_WRITE, 8 * M, 65536, payload=b"\2" * 65536)[0] == 0, "write")
    check(c.cmd(CMD_WRITE, 16 * M, 4096, payload=b"\0" * 4096)[0] == 0, "write of zeros")
    want = [(1 * M, 3), (4096, 0), (7 * M - 4096, 3), (65536, 0),
            (8 * M - 65536, 3), (4096, 0), (size - 16 * M - 4096, 3)]
    check(full_map(c, 0, size) == want, "after writes")
    # a trim and a write-zeroes free whole pages; half a page stays data
    check(c.cmd(CMD_TRIM, 8 * M + 8192, 8192)[0] == 0, "trim")
    check(c.cmd(CMD_ZERO, 1 * M, 4096, FLAG_FAST_ZERO)[0] == 0, "fast zero on memory")
    check(c.cmd(CMD_ZERO, 8 * M + 32768, 512)[0] == 0, "zero half a page")
    want = [(8 * M, 3), (8192, 0), (8192, 3), (65536 - 16384, 0),
            (8 * M - 65536, 3), (4096, 0), (size - 16 * M - 4096, 3)]
    check(full_map(c, 0, size) == want, "after trim and zero")
    check(c.cmd(CMD_READ, 1 * M, 4096)[1] == b"\0" * 4096, "fast zero reads zeros")
    # REQ_ONE: exactly one descriptor, no longer than asked
    check(bs(c, 0, size, FLAG_REQ_ONE) == (0, [(8 * M, 3)]), "REQ_ONE from 0")
    check(bs(c, 8 * M, 4096, FLAG_REQ_ONE) == (0, [(4096, 0)]), "REQ_ONE inside data")
    check(bs(c, 4 * M, 512, FLAG_REQ_ONE) == (0, [(512, 3)]), "REQ_ONE 512 bytes")
    # errors, and the connection goes on
    for off, ln, fl, what in ((0, 0, 0, "length 0"), (size - 4096, 8192, 0, "past the end"),
                              (size, 512, 0, "at the end"), (100, 512, 0, "unaligned"),
                              (0, 4096, 0x20, "unknown flag"), (0, 4096, FLAG_FUA, "FUA")):
        check(c.cmd(CMD_BS, off, ln, fl)[0] == EINVAL, "BLOCK_STATUS " + what + ": EINVAL")
    check(bs(c, 0, 4096)[0] == 0, "block status after errors")
    # a map finer than one reply: alternate pages, capped descriptors
    for i in range(700):
        c.request(CMD_WRITE, 32 * M + i * 8192, 4096, cookie=100 + i, payload=b"\3" * 4096)
    for i in range(700):
        check(c.response()[0] == 0, "alternating write")
    err, d = bs(c, 32 * M, 700 * 8192)
    check(err == 0 and 1 <= len(d) <= 511 and sum(n for n, _ in d) < 700 * 8192,
          "a long map is cut at 511 descriptors (%d)" % len(d))
    check(all(f == (0 if i % 2 == 0 else 3) for i, (n, f) in enumerate(d)), "alternating states")
    check(full_map(c, 32 * M, 700 * 8192) == [(4096, 0), (4096, 3)] * 700,
          "the whole alternating map in several replies")
    # CACHE: a read ahead; whole export in one request; past the end
    check(c.cmd(CMD_CACHE, 0, 1 * M)[0] == 0, "cache 1 MiB")
    check(c.cmd(CMD_CACHE, 0, size)[0] == 0, "cache all (larger than max_block)")
    check(c.cmd(CMD_CACHE, 100, 1000)[0] == 0, "cache unaligned")
    check(c.cmd(CMD_CACHE, size - 4096, 8192)[0] == EINVAL, "cache past the end: EINVAL")
    check(c.cmd(CMD_ZERO, 0, 4096, FLAG_FAST_ZERO | 0x40)[0] == EINVAL, "zero unknown flag")
    c.request(CMD_DISC)


def sparse_file(path, image, fast):
    size = os.path.getsize(image) & ~511
    fd = os.open(image, os.O_RDONLY)

    def seek_map():
        out, pos = [], 0
        while pos < size:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                d = size
            d = min(d, size)
            if d > pos:
                out.append((d - pos, 3))
                pos = d
                continue
            h = min(os.lseek(fd, pos, os.SEEK_HOLE), size)
            out.append((h - pos, 0))
            pos = h
        return out

    c, got, _ = connect(path)
    check(got == size, "file size")
    want = seek_map()
    check(len(want) > 2, "the file is sparse here (%s)" % want)
    have = full_map(c, 0, size)
    check(have == want, "file map %s == SEEK_DATA/SEEK_HOLE %s" % (have, want))
    check(bs(c, 0, size, FLAG_REQ_ONE) == (0, [want[0]]), "file REQ_ONE")
    check(c.cmd(CMD_CACHE, 0, size)[0] == 0, "file cache (fadvise)")
    before = c.cmd(CMD_READ, 1 * M, 65536)[1]
    err = c.cmd(CMD_ZERO, 1 * M, 65536, FLAG_FAST_ZERO)[0]
    if fast:
        check(err == 0, "fast zero on a file system that punches holes: %d" % err)
        check(c.cmd(CMD_READ, 1 * M, 65536)[1] == b"\0" * 65536, "zeroed")
        have = full_map(c, 0, size)
        check(have == seek_map(), "map after fast zero")
    else:
        check(err == ENOTSUP, "fast zero that would write: ENOTSUP (%d)" % err)
        check(c.cmd(CMD_READ, 1 * M, 65536)[1] == before, "ENOTSUP left the data")
    c.request(CMD_DISC)


def blockdev(path, fast):
    """A block device: all data; fast zero as its write-zeroes command says."""
    c, size, _ = connect(path)
    check(full_map(c, 0, size) == [(size, 0)], "a block device is all data")
    check(c.cmd(CMD_WRITE, M, 4096, payload=b"\7" * 4096)[0] == 0, "write to the device")
    err = c.cmd(CMD_ZERO, M, 4096, FLAG_FAST_ZERO)[0]
    if fast:
        check(err == 0, "fast zero with a write-zeroes command: %d" % err)
        check(c.cmd(CMD_READ, M, 4096)[1] == b"\0" * 4096, "device zeroed")
    else:
        check(err == ENOTSUP, "fast zero without a write-zeroes command: ENOTSUP (%d)" % err)
        check(c.cmd(CMD_READ, M, 4096)[1] == b"\7" * 4096, "ENOTSUP left the data")
    check(c.cmd(CMD_CACHE, 0, size)[0] == 0, "device cache (fadvise)")
    c.request(CMD_DISC)


what = sys.argv[1]
if what == "memory":
    memory(sys.argv[2])
elif what == "blockdev":
    blockdev(sys.argv[2], sys.argv[3] == "1")
else:
    sparse_file(sys.argv[2], sys.argv[3], sys.argv[4] == "1")
finish(what)
PY

# the map nbdinfo --map --json shows, as "length:type" lines, merged
nbdinfo_map() {
	nbdinfo --map --json "$uri" | python3 -c '
import json, sys
out = []
for e in json.load(sys.stdin):
    if out and out[-1][1] == e["type"]:
        out[-1][0] += e["length"]
    else:
        out.append([e["length"], e["type"]])
for n, t in out:
    print("%d:%d" % (n, t))'
}

# the capabilities nbdinfo --json lists: the same as nbdkit's memory plugin
caps() {
	nbdinfo --json "$1" | python3 -c '
import json, sys
e = json.load(sys.stdin)["exports"][0]
print(" ".join(sorted("%s=%s" % (k, v) for k, v in e.items()
                      if k.startswith(("can_", "is_")) or k == "contexts")))'
}

nbd_start --memory 64M
if [ $have_nbdinfo = 1 ] && command -v nbdkit >/dev/null; then
	nbdkit -U "$tmp/nbdkit.sock" -P "$tmp/nbdkit.pid" memory 64M ||
		fail "nbdkit memory did not start"
	for _ in $(seq 100); do [ -S "$tmp/nbdkit.sock" ] && break; sleep 0.05; done
	theirs=$(caps "nbd+unix:///?socket=$tmp/nbdkit.sock")
	kill "$(cat "$tmp/nbdkit.pid")"
	ours=$(caps "$uri")
	[ "$ours" = "$theirs" ] || fail "capabilities differ: rqnbd: $ours; nbdkit: $theirs"
	echo "same capabilities as nbdkit memory: $ours"
else
	echo "nbdkit or nbdinfo missing: no capability comparison"
fi
timeout 120 python3 "$tmp/bs.py" memory "$sock" || fail "memory block status"
if [ $have_nbdinfo = 1 ]; then
	got=$(nbdinfo_map | tr '\n' ' ')
	# what bs.py left: data at 8M+0..8K, 8M+16K..64K, 16M (4K), 32M alternating
	case "$got" in
	"8388608:3 8192:0 8192:3 49152:0 8323072:3 4096:0 16773120:3 4096:0 4096:3 "*) ;;
	*) fail "nbdinfo --map on memory: $got" ;;
	esac
	nbdinfo --json "$uri" | grep -q '"base:allocation"' || fail "nbdinfo: no base:allocation"
fi
nbd_stop

# a sparse file: data at 1M (64K), 5M (4K) and the last 8K
img=$tmp/sparse.img
truncate -s 32M "$img"
head -c 65536 /dev/urandom | dd of="$img" bs=64k seek=16 conv=notrunc status=none
head -c 4096 /dev/urandom | dd of="$img" bs=4k seek=1280 conv=notrunc status=none
head -c 8192 /dev/urandom | dd of="$img" bs=8k seek=4095 conv=notrunc status=none
sync "$img" 2>/dev/null
fast=0
: >"$tmp/probe"
fallocate -p -o 0 -l 4096 "$tmp/probe" 2>/dev/null && fast=1
nbd_start --file "$img"
if [ $have_nbdinfo = 1 ]; then
	want=$(python3 - "$img" <<'PY'
import os, sys
fd, size, pos, out = os.open(sys.argv[1], os.O_RDONLY), os.path.getsize(sys.argv[1]), 0, []
while pos < size:
    try:
        d = min(os.lseek(fd, pos, os.SEEK_DATA), size)
    except OSError:
        d = size
    if d > pos:
        out.append("%d:3" % (d - pos)); pos = d; continue
    h = min(os.lseek(fd, pos, os.SEEK_HOLE), size)
    out.append("%d:0" % (h - pos)); pos = h
print(" ".join(out))
PY
)
	got=$(nbdinfo_map | tr '\n' ' ')
	[ "$got" = "$want " ] || fail "nbdinfo --map on a sparse file: '$got', SEEK_HOLE says '$want'"
fi
timeout 120 python3 "$tmp/bs.py" file "$sock" "$img" $fast || fail "file block status"
nbd_stop

# a block device (a loop device over a sparse file, as root): all data,
# fast zero as its queue/write_zeroes_max_bytes says
loopmsg="no loop device (not root or no losetup): block device part skipped"
if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null &&
	loop=$(losetup -f --show "$img" 2>/dev/null); then
	trap 'losetup -d "$loop"; nbd_cleanup' EXIT
	wz=$(cat "/sys/block/$(basename "$loop")/queue/write_zeroes_max_bytes" 2>/dev/null || echo 0)
	nbd_start --file "$loop"
	timeout 120 python3 "$tmp/bs.py" blockdev "$sock" $([ "$wz" != 0 ] && echo 1 || echo 0) ||
		fail "block device status and fast zero"
	nbd_stop
	loopmsg="block device $loop: write_zeroes_max_bytes $wz"
fi
echo "ok: block status, cache and fast zero (file system punches holes: $fast; $loopmsg)"
