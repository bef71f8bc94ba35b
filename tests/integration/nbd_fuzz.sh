#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Random clients never crash, hang or corrupt rqnbd (nbd_garbage.sh sends
# chosen bad input; this sends random input, reproducibly: the seed is
# fixed).  Six threads keep connecting for a few seconds each: some send
# junk instead of a greeting, some random options (valid and unknown ones,
# lengths that lie) before NBD_OPT_GO, then a stream of requests mixing valid
# and random commands, flags, offsets (in range, past the end, absurd) and
# lengths (absurd ones included), writes whose payload is short or missing,
# junk instead of a request header, and vanishing with replies unread.
# Before, a good client writes 8 MiB of random data to the second half of
# the export, which the fuzzers never write (they write only the first
# half); afterwards it reads exactly that data back, nbdinfo still sees
# the export, and the server stops with exit status 0.  Run once per front
# end, with a scheduler that holds state per client (mq-deadline / cfq).
#
# usage: nbd_fuzz.sh RQNBD [mq|sq]    Skips (77) without python3 or nbdcopy.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3 nbdcopy nbdinfo sha256sum
nbd_init "$1"
front=${2:-mq}
sched=mq-deadline
[ "$front" = sq ] && sched=cfq

nbd_start --memory 64M --front "$front" --sched "$sched"
head -c 8M /dev/urandom >"$tmp/data"
python3 - "$sock" "$tmp/data" write <<'PY' || fail "good client could not write"
import socket, struct, sys
NBDMAGIC, IHAVEOPT = 0x4e42444d41474943, 0x49484156454F5054
def recvall(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(30)
recvall(s, 18); s.sendall(struct.pack(">I", 3))
body = struct.pack(">I", 0) + struct.pack(">H", 0)
s.sendall(struct.pack(">QII", IHAVEOPT, 7, len(body)) + body)
while True:
    magic, opt, typ, ln = struct.unpack(">QIII", recvall(s, 20))
    if ln: recvall(s, ln)
    if typ == 1: break
    if typ & 0x80000000: sys.exit(1)
data = open(sys.argv[2], "rb").read()
base = 32 << 20
for i in range(0, len(data), 1 << 20):
    chunk = data[i:i + (1 << 20)]
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 1, i, base + i, len(chunk)) + chunk)
    magic, err, handle = struct.unpack(">IIQ", recvall(s, 16))
    if magic != 0x67446698 or err: sys.exit(1)
s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 3, 0, 0, 0))   # flush
magic, err, handle = struct.unpack(">IIQ", recvall(s, 16))
sys.exit(1 if err else 0)
PY

cat >"$tmp/fuzz.py" <<'PY'
# SPDX-License-Identifier: LGPL-2.1-or-later
import os, random, socket, struct, sys, threading, time
path, secs, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
IHAVEOPT, REQ_MAGIC, HALF = 0x49484156454F5054, 0x25609513, 32 << 20
stop = time.time() + secs
count = [0, 0]

def recv_some(s, n, t):
    s.settimeout(t)
    try:
        return s.recv(n)
    except OSError:
        return b""

def recvall(s, n):
    s.settimeout(5); b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b

def junk(rnd, n):
    return bytes(rnd.getrandbits(8) for _ in range(n))

def handshake(s, rnd):
    recvall(s, 18)
    s.sendall(struct.pack(">I", 3))
    for _ in range(rnd.randint(0, 3)):
        opt = rnd.choice([1, 3, 5, 6, 8, 9, 10, rnd.getrandbits(32)])
        data = junk(rnd, rnd.choice([0, 1, 4, 8, 100, rnd.randint(0, 3000)]))
        ln = len(data) if rnd.random() < 0.85 else rnd.getrandbits(32)
        s.sendall(struct.pack(">QII", IHAVEOPT, opt, ln) + data)
        if ln != len(data):
            return False
        recv_some(s, 65536, 0.02)
    body = struct.pack(">IH", 0, 0)
    s.sendall(struct.pack(">QII", IHAVEOPT, 7, len(body)) + body)
    while True:
        magic, opt, typ, ln = struct.unpack(">QIII", recvall(s, 20))
        if ln: recvall(s, ln)
        if typ == 1: return True
        if typ & 0x80000000: return False

def request(s, rnd):
    typ = rnd.choice([0, 0, 1, 1, 3, 4, 6, rnd.getrandbits(16)])
    flags = rnd.choice([0, 0, 1, 2, 4, rnd.getrandbits(16)])
    ln = rnd.choice([512, 4096, 65536, rnd.randint(0, 1 << 20), rnd.getrandbits(32), 0])
    off = rnd.choice([rnd.randint(0, HALF) & ~511, rnd.randint(0, HALF), rnd.getrandbits(63),
                      (64 << 20) - 512, 64 << 20])
    if typ in (1, 3, 4, 6) and off + ln > HALF and off < (64 << 20):
        off = rnd.randint(0, HALF // 2)    # never touch the good client's half
        ln = min(ln, HALF // 2)
    payload = b""
    if typ == 1 and ln <= (1 << 20):
        payload = junk(rnd, ln if rnd.random() < 0.9 else rnd.randint(0, ln))
    s.sendall(struct.pack(">IHHQQI", REQ_MAGIC, flags, typ, rnd.getrandbits(64), off, ln) + payload)
    return typ

def worker(tid):
    rnd = random.Random(seed * 100 + tid)
    while time.time() < stop:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            count[0] += 1
            if rnd.random() < 0.1:
                s.sendall(junk(rnd, rnd.randint(1, 200)))
                continue
            if not handshake(s, rnd):
                continue
            for _ in range(rnd.randint(1, 100)):
                if rnd.random() < 0.03:
                    s.sendall(junk(rnd, rnd.randint(1, 64)))
                    break
                count[1] += 1
                if request(s, rnd) == 2:
                    break
                recv_some(s, 1 << 21, 0.001)
        except (EOFError, OSError):
            pass
        finally:
            s.close()

ts = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
[t.start() for t in ts]
[t.join() for t in ts]
print("fuzz: %d connections, %d requests" % tuple(count))
PY
timeout 120 python3 "$tmp/fuzz.py" "$sock" 8 20261203 || fail "fuzzer failed"
kill -0 "$nbd_pid" 2>/dev/null || fail "rqnbd died under random input"
timeout 30 nbdinfo "$uri" 2>&1 | grep -q "67108864" || fail "nbdinfo no longer sees the export"
timeout 60 nbdcopy "$uri" "$tmp/back" || fail "reading back failed"
tail -c 32M "$tmp/back" | head -c 8M >"$tmp/back8"
[ "$(sha256sum <"$tmp/data")" = "$(sha256sum <"$tmp/back8")" ] ||
	fail "the good client's data changed under random input"
nbd_stop
echo "ok: rqnbd ($front, $sched) survived random clients with data intact"
