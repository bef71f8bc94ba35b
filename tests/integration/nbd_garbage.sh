#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Bad clients never crash, hang or corrupt rqnbd.  A good client writes
# 16 MiB of random data; then, with several at once, clients send junk
# handshakes, unknown and malformed options, requests past the end, over
# the maximum, unaligned, with unknown commands and flags, junk instead of
# requests, absurd lengths, and vanish mid-payload or with replies
# unread.  Each gets the protocol's answer (an error reply, or a hang-up
# where the protocol allows no answer).  Afterwards a good client still
# reads back exactly its data, and the server stops cleanly.
#
# usage: nbd_garbage.sh RQNBD    Skips (77) without python3 or nbdcopy.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3 nbdcopy sha256sum
nbd_init "$1"
rawnbd

nbd_start --memory 64M
head -c 16M /dev/urandom >"$tmp/data"
timeout 60 nbdcopy "$tmp/data" "$uri" || fail "initial nbdcopy failed"

cat >"$tmp/garbage.py" <<'PY'
# SPDX-License-Identifier: LGPL-2.1-or-later
import os, random, struct, sys, threading
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rawnbd import *

path = sys.argv[1]
SIZE = 64 << 20
failures = []

def check(cond, what):
    if not cond:
        failures.append(what)
        print("  not ok:", what, flush=True)

def hangs_up(c, what):
    check(c.closed_by_server(), what + ": server should hang up")

def handshake_junk():
    c = Conn(path); c.recv(18); c.send(os.urandom(100)); hangs_up(c, "junk after greeting")
    c = Conn(path); c.greet(cflags=0xffffffff); hangs_up(c, "unknown client flags")
    c = Conn(path); c.greet(); c.send(struct.pack(">QII", 0x1234, 1, 0)); hangs_up(c, "bad option magic")
    c = Conn(path); c.greet(); c.send(b"\x49\x48"); c.s.close()          # vanish mid-option
    c = Conn(path); c.greet(); c.opt(OPT_EXPORT_NAME, b"no-such-export"); hangs_up(c, "unknown EXPORT_NAME")

def options():
    c = Conn(path); c.greet()
    c.opt(0x1234); check(c.replies()[-1][0] == ERR_UNSUP, "unknown option: ERR_UNSUP")
    c.opt(5); check(c.replies()[-1][0] == ERR_UNSUP, "STARTTLS: ERR_UNSUP")
    c.opt(OPT_LIST); r = c.replies()
    check(r[0][0] == REP_SERVER and r[-1][0] == REP_ACK, "LIST: SERVER then ACK")
    c.opt(OPT_LIST, b"x"); check(c.replies()[-1][0] == ERR_INVALID, "LIST with data: ERR_INVALID")
    c.opt(OPT_SR, b"xx"); check(c.replies()[-1][0] == ERR_INVALID, "STRUCTURED_REPLY with data: ERR_INVALID")
    c.opt(OPT_INFO, b"\x00\x00\x00\x09ab"); check(c.replies()[-1][0] == ERR_INVALID, "short INFO: ERR_INVALID")
    c.opt(OPT_INFO, struct.pack(">I", 3) + b"zzz" + struct.pack(">H", 0))
    check(c.replies()[-1][0] == ERR_UNKNOWN, "INFO of an unknown export: ERR_UNKNOWN")
    c.opt(OPT_INFO, struct.pack(">IH", 0, 0)); r = c.replies()
    check(r[-1][0] == REP_ACK and any(t == REP_INFO for t, _ in r), "INFO: INFO then ACK")
    c.opt(0x77, b"\0" * 100000); check(c.replies()[-1][0] == ERR_TOO_BIG, "100 kB option: ERR_TOO_BIG")
    c.opt(OPT_ABORT); check(c.replies()[-1][0] == REP_ACK, "ABORT: ACK")
    hangs_up(c, "after ABORT")
    c = Conn(path); c.greet(); c.send(struct.pack(">QII", OPTS, 1, 0xffffffff)); hangs_up(c, "4 GiB option")

def transmission(structured):
    c = Conn(path); c.greet()
    size, flags = c.go(structured=structured)
    check(size == SIZE, "GO size")
    check(flags & FLAG_MULTI_CONN and not flags & FLAG_READ_ONLY, "GO flags")
    tag = "structured" if structured else "simple"
    check(c.cmd(CMD_READ, SIZE - 4096, 8192)[0] == EINVAL, tag + ": read past the end: EINVAL")
    check(c.cmd(CMD_READ, 1 << 62, 4096)[0] == EINVAL, tag + ": read at 2^62: EINVAL")
    check(c.cmd(CMD_WRITE, SIZE, 4096, payload=b"x" * 4096)[0] == ENOSPC, tag + ": write past the end: ENOSPC")
    check(c.cmd(CMD_ZERO, SIZE - 512, 1024)[0] == ENOSPC, tag + ": zero past the end: ENOSPC")
    check(c.cmd(CMD_TRIM, SIZE, 512)[0] == EINVAL, tag + ": trim past the end: EINVAL")
    check(c.cmd(CMD_READ, 100, 512)[0] == EINVAL, tag + ": unaligned read: EINVAL")
    check(c.cmd(CMD_WRITE, 0, 100, payload=b"y" * 100)[0] == EINVAL, tag + ": unaligned write: EINVAL")
    check(c.cmd(CMD_READ, 0, 33 << 20)[0] == EINVAL, tag + ": 33 MiB read: EINVAL")
    big = 33 << 20
    check(c.cmd(CMD_WRITE, 0, big, payload=b"z" * big)[0] == EINVAL, tag + ": 33 MiB write: EINVAL, payload skipped")
    check(c.cmd(99, 0, 0)[0] == EINVAL, tag + ": unknown command: EINVAL")
    check(c.cmd(CMD_BS, 0, 4096)[0] == EINVAL, tag + ": BLOCK_STATUS without context: EINVAL")
    check(c.cmd(CMD_READ, 0, 4096, flags=0x80)[0] == EINVAL, tag + ": unknown flag: EINVAL")
    check(c.cmd(CMD_WRITE, 0, 512, flags=FLAG_DF, payload=b"w" * 512)[0] == EINVAL, tag + ": DF on write: EINVAL")
    check(c.cmd(CMD_FLUSH)[0] == 0, tag + ": flush")
    check(c.cmd(CMD_CACHE, 0, 4096)[0] == 0, tag + ": cache (a no-op)")
    check(c.cmd(CMD_READ, 0, 0)[0] == 0, tag + ": zero-length read")
    # the stream is still in sync: a write and read round trip at the end
    off = SIZE - 8192
    blob = os.urandom(8192)
    check(c.cmd(CMD_WRITE, off, 8192, flags=FLAG_FUA, payload=blob)[0] == 0, tag + ": FUA write")
    err, data = c.cmd(CMD_READ, off, 8192)
    check(err == 0 and data == blob, tag + ": read back")
    check(c.cmd(CMD_ZERO, off, 4096, flags=FLAG_NO_HOLE)[0] == 0, tag + ": write zeroes")
    check(c.cmd(CMD_TRIM, off + 4096 + 100, 3000)[0] == 0, tag + ": unaligned trim (rounded in)")
    err, data = c.cmd(CMD_READ, off, 8192)
    check(err == 0 and data[:4096] == bytes(4096), tag + ": zeroes read back")
    # pipelined: many requests, replies in any order, matched by cookie
    for i in range(100):
        c.request(CMD_READ, (i * 4096) % SIZE, 4096, cookie=1000 + i)
    got = set()
    for i in range(100):
        err, ck, data = c.response(4096)
        got.add(ck)
        check(err == 0 and len(data) == 4096, tag + ": pipelined read")
    check(got == set(range(1000, 1100)), tag + ": every cookie answered once")
    # then junk instead of a request: out of sync, the server hangs up
    c.send(os.urandom(28)); hangs_up(c, tag + ": junk request")

def vanish():
    c = Conn(path); c.greet(); c.go()
    c.request(CMD_WRITE, 32 << 20, 1 << 20); c.send(b"q" * 1000); c.s.close()   # mid-payload
    c = Conn(path); c.greet(); c.go()
    for i in range(64):
        c.request(CMD_READ, i << 20, 1 << 20, cookie=i)                           # never read
    c.s.close()
    c = Conn(path); c.greet(); c.go()
    c.request(CMD_WRITE, 0, 0xfffffe00); hangs_up(c, "4 GiB write")
    c = Conn(path); c.greet(); c.go(); c.request(CMD_DISC); hangs_up(c, "DISC")

def junk_storm(seed):
    rnd = random.Random(seed)
    for _ in range(20):
        try:
            c = Conn(path, timeout=5); c.greet(); c.go(structured=rnd.random() < 0.5)
            for _ in range(rnd.randrange(1, 20)):
                # only past 32 MiB: the good client's data is below
                c.request(rnd.randrange(0, 10), rnd.randrange(32 << 20, SIZE * 2) & ~511,
                          rnd.choice([0, 512, 4096, 1 << 20]), flags=rnd.randrange(0, 8),
                          cookie=rnd.randrange(1 << 64))
            c.send(os.urandom(rnd.randrange(0, 64)))
            c.s.close()
        except (Closed, OSError):
            pass

tests = [handshake_junk, options, lambda: transmission(False), lambda: transmission(True), vanish]
storms = [threading.Thread(target=junk_storm, args=(i,)) for i in range(4)]
for t in storms:
    t.start()
for t in tests:
    try:
        t()
    except Exception as e:
        check(False, "%s raised %r" % (getattr(t, "__name__", "test"), e))
for t in storms:
    t.join()
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
PY
timeout 200 python3 "$tmp/garbage.py" "$sock" || fail "bad clients were not answered as the protocol says"
kill -0 "$nbd_pid" 2>/dev/null || fail "rqnbd died"

# the good client's data is intact (the tests wrote only past 16 MiB)
timeout 60 nbdcopy "$uri" "$tmp/out" || fail "nbdcopy out failed"
head -c 16M "$tmp/out" | cmp - "$tmp/data" || fail "data changed"
echo "good client: 16 MiB read back intact"
nbd_stop
echo PASS
