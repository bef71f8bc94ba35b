# SPDX-License-Identifier: LGPL-2.1-or-later
"""Hostile and unlucky NBD clients for the rqnbd tests (python3 stdlib only).

Used as a module by the nbd_*.sh tests (python3 nbd_abuse.py SCENARIO ...):
each scenario starts its clients, checks what the server does with
observable facts (a reply, a hang-up, /proc/PID/status VmRSS,
/proc/PID/stat utime+stime) and exits 1 naming what did not hold.
Waits poll an observable state up to a bound; nothing sleeps for
synchronisation.
"""
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rawnbd import (Closed, CMD_READ, CMD_WRITE, ENOSPC, REQ,  # noqa: E402
                    Conn as RawConn)

HZ = os.sysconf("SC_CLK_TCK")


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def say(msg):
    print(msg, flush=True)


# ------------------------------------------------------------ the server


def rss_kib(pid):
    """VmRSS of @pid in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid):
    """utime + stime of @pid (all its threads) in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def wait_for(cond, bound, what):
    """Poll @cond until true, at most @bound seconds; fail naming @what."""
    end = time.monotonic() + bound
    while not cond():
        if time.monotonic() > end:
            fail("%s (waited %g s)" % (what, bound))
        time.sleep(0.05)


# ------------------------------------------------------------ a client


class Conn(RawConn):
    """rawnbd's client, also over TCP from a chosen source address."""

    def __init__(self, addr, timeout=10, source=None):
        """Connect as a blocking client would: a full unix backlog (EAGAIN,
        which a socket with a timeout gets at once) is waited out."""
        end = time.monotonic() + timeout
        while True:
            if isinstance(addr, tuple):
                self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                if source:
                    self.s.bind((source, 0))
            else:
                self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            try:
                self.s.connect(addr)
                break
            except BlockingIOError:
                self.s.close()
                if time.monotonic() > end:
                    raise
                time.sleep(0.01)
        self.structured = False

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def hung_up(self, timeout):
        """True if the server closes the connection within @timeout s."""
        self.s.settimeout(timeout)
        return self.closed_by_server()

    def go(self, name=b"", structured=False):
        """Greet, then GO: the export's size."""
        self.greet()
        return RawConn.go(self, name, structured)[0]

    def req(self, typ, offset=0, length=0, cookie=1, payload=b""):
        self.request(typ, offset, length, 0, cookie, payload)


def good_roundtrip(addr, offset, size=4096, timeout=10):
    """Connect, write a random block, read it back; raise if anything is off."""
    c = Conn(addr, timeout)
    try:
        c.go()
        blob = os.urandom(size)
        c.req(CMD_WRITE, offset, size, 1, blob)
        if c.response()[0]:
            raise AssertionError("write failed")
        c.req(CMD_READ, offset, size, 2)
        err, _, data = c.response(size)
        if err or data != blob:
            raise AssertionError("read back differs")
    finally:
        c.close()


def open_many(addr, n, what, **kw):
    out = []
    for _ in range(n):
        try:
            out.append(Conn(addr, **kw))
        except OSError as e:
            fail("%s: connect failed: %s" % (what, e))
    return out


def addr_of(arg):
    """A unix socket path, or HOST:PORT."""
    if arg.startswith("/"):
        return arg
    host, port = arg.rsplit(":", 1)
    return (host, int(port))


# ------------------------------------------------------------ scenarios


def memory(addr, pid, nclients, reads, size, bound_mib, idle_slack_mib):
    """Clients pipeline @reads reads of @size bytes and never read a reply:
    the server's RSS stays under idle + @bound_mib; after they go, it comes
    back within @idle_slack_mib of idle."""
    good_roundtrip(addr, 0)
    idle = rss_kib(pid)
    conns = open_many(addr, nclients, "non-reader")
    for c in conns:
        c.go()
        c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    for c in conns:
        for i in range(reads):
            c.req(CMD_READ, (i * size) % (64 << 20), size, i)
    peak = idle
    # the server fills what it may: sample until RSS stops growing for 1 s
    last_growth = time.monotonic()
    end = last_growth + 20
    while time.monotonic() < end and time.monotonic() - last_growth < 1.0:
        r = rss_kib(pid)
        if r > peak + 1024:
            last_growth = time.monotonic()
        peak = max(peak, r)
        time.sleep(0.05)
    grown = (peak - idle) / 1024
    say("idle RSS %d MiB; with %d clients not reading %d x %d KiB reads: %d MiB "
        "(+%d MiB; bound +%d MiB)" % (idle // 1024, nclients, reads, size >> 10,
                                     peak // 1024, grown, bound_mib))
    if grown > bound_mib:
        fail("RSS grew by %d MiB, over the bound of %d MiB" % (grown, bound_mib))
    for c in conns:
        c.close()
    wait_for(lambda: rss_kib(pid) < idle + idle_slack_mib * 1024, 15,
             "RSS back within %d MiB of idle after the clients left" % idle_slack_mib)
    say("after they left: %d MiB" % (rss_kib(pid) // 1024))
    good_roundtrip(addr, 8192)


def pressure(addr, pid, nclients, bound_s):
    """@nclients pipeline 1 MiB reads and never read, more than the pool
    holds; a good client is served within @bound_s seconds all the same
    (those holding buffers without reading are closed first), and the
    server's RSS stays bounded."""
    conns = open_many(addr, nclients, "non-reader")
    for c in conns:
        c.go()
        c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for i in range(32):
            c.req(CMD_READ, i << 20, 1 << 20, i)
    t0 = time.monotonic()
    try:
        good_roundtrip(addr, 0, 65536, timeout=bound_s)
    except (OSError, Closed, AssertionError) as e:
        fail("a good client was not served within %g s while %d clients held the pool: %r"
             % (bound_s, nclients, e))
    say("%d clients holding the pool without reading: a good client served in %.2f s"
        % (nclients, time.monotonic() - t0))
    closed = sum(1 for c in conns if c.hung_up(0.05))
    say("%d of them closed by the server" % closed)
    for c in conns:
        c.close()


def idle_after_reads(addr, pid, nclients, slack_mib):
    """Clients pipeline 1 MiB reads, take every reply, stay connected and
    idle: the server's cache goes back (RSS near idle with them open)."""
    good_roundtrip(addr, 0)
    idle = rss_kib(pid)
    conns = open_many(addr, nclients, "idle reader")
    for c in conns:
        c.go()
        for i in range(64):
            c.req(CMD_READ, i << 20, 1 << 20, i)
        for i in range(64):
            c.response(1 << 20)
    wait_for(lambda: rss_kib(pid) < idle + slack_mib * 1024, 15,
             "RSS within %d MiB of idle with %d idle connections" % (slack_mib, nclients))
    say("%d idle connections after 64 x 1 MiB reads each: RSS %d MiB (idle %d MiB)"
        % (nclients, rss_kib(pid) // 1024, idle // 1024))
    for c in conns:
        c.close()


def trickle_handshake(c, stop):
    try:
        c.recv(18)
        while not stop.is_set():
            c.send(b"\0")
            stop.wait(1.0)
    except (OSError, Closed):
        pass


def lockout(addr, pid, silent, trickling, rounds, bound_s):
    """@silent clients connect and say nothing, @trickling ones send a byte a
    second; a good client is served @rounds times throughout, each within
    @bound_s seconds, and an established client idle since before the flood
    keeps its connection (handshakes are evicted first)."""
    stop = threading.Event()
    keeper = Conn(addr)
    keeper.go()
    conns = open_many(addr, silent, "silent")
    tr = open_many(addr, trickling, "trickler")
    threads = [threading.Thread(target=trickle_handshake, args=(c, stop), daemon=True)
               for c in tr]
    for t in threads:
        t.start()
    worst = 0.0
    try:
        for i in range(rounds):
            t0 = time.monotonic()
            try:
                good_roundtrip(addr, (i % 64) * 4096, timeout=bound_s)
            except (OSError, Closed, AssertionError) as e:
                fail("good client %d of %d not served within %g s: %r" % (i + 1, rounds, bound_s, e))
            worst = max(worst, time.monotonic() - t0)
            # keep the flood at full strength: replace what the server closed
            conns = [c for c in conns if not _closed_now(c)]
            conns += open_many(addr, silent - len(conns), "silent")
    finally:
        stop.set()
    say("%d silent + %d trickling connections: %d good clients served, slowest %.2f s"
        % (silent, trickling, rounds, worst))
    try:
        keeper.req(CMD_READ, 0, 4096, 5)
        err, _, _ = keeper.response(4096)
        if err:
            raise AssertionError("error %d" % err)
    except (OSError, Closed, AssertionError) as e:
        fail("the idle established client lost its connection to the flood: %r" % e)
    say("the established client idle through the flood still has its connection")
    keeper.close()
    for c in conns + tr:
        c.close()
    if not alive(pid):
        fail("the server died")


def _closed_now(c):
    c.s.setblocking(False)
    try:
        return c.s.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        c.s.setblocking(True)


def deadlines(addr, bound_s):
    """A handshake trickled a byte a second, a request header trickled in
    transmission, and an idle connection are each closed by the server
    within @bound_s seconds."""
    stop = threading.Event()
    hs = Conn(addr)
    t = threading.Thread(target=trickle_handshake, args=(hs, stop), daemon=True)
    t.start()
    tx = Conn(addr)
    tx.go()
    idle = Conn(addr)
    idle.go()
    hdr = struct.pack(">IHHQQI", REQ, 0, CMD_READ, 9, 0, 4096)

    def trickle_tx():
        try:
            for b in hdr[:-1]:
                if stop.is_set():
                    return
                tx.send(bytes([b]))
                stop.wait(1.0)
        except OSError:
            pass
    t2 = threading.Thread(target=trickle_tx, daemon=True)
    t2.start()
    t0 = time.monotonic()
    ok = hs.hung_up(bound_s)
    say("handshake trickled a byte a second: %s after %.1f s"
        % ("closed" if ok else "NOT closed", time.monotonic() - t0))
    ok2 = tx.hung_up(max(0.1, bound_s - (time.monotonic() - t0)))
    say("request header trickled a byte a second: %s after %.1f s"
        % ("closed" if ok2 else "NOT closed", time.monotonic() - t0))
    ok3 = idle.hung_up(max(0.1, bound_s - (time.monotonic() - t0)))
    say("idle connection: %s after %.1f s"
        % ("closed" if ok3 else "NOT closed", time.monotonic() - t0))
    stop.set()
    if not (ok and ok2 and ok3):
        fail("a slow or idle client kept its connection past %g s" % bound_s)


def per_client(host, port, limit, evicting):
    """@limit silent connections from 127.0.0.1 fill that client's quota:
    one more from it is refused (or, @evicting, served by closing its
    oldest), while 127.0.0.2 is still served."""
    addr = (host, port)
    conns = [Conn(addr, 5, "127.0.0.1") for _ in range(limit)]
    for c in conns:
        c.recv(18)  # each got its greeting
    extra = Conn(addr, 5, "127.0.0.1")
    try:
        extra.recv(18)
        got = True
    except (Closed, OSError):
        got = False
    if evicting:
        if not got:
            fail("the client at its limit was refused instead of its idlest connection")
        if not conns[0].hung_up(5) and not any(c.hung_up(0.2) for c in conns[1:]):
            fail("none of the client's older connections was closed")
        say("127.0.0.1 at its limit of %d: a new one served, its idlest closed" % limit)
    else:
        if got:
            fail("a %d-th connection from 127.0.0.1 was served past --max-per-client %d"
                 % (limit + 1, limit))
        say("127.0.0.1 at its limit of %d: one more refused" % limit)
    other = Conn(addr, 5, "127.0.0.2")
    try:
        other.recv(18)
    except (Closed, OSError):
        fail("127.0.0.2 refused because 127.0.0.1 is at its limit")
    say("127.0.0.2 served meanwhile")


def emfile(addr, pid, pending, window):
    """With the server out of descriptors (held by silent connections) and
    @pending more clients waiting to be accepted, it burns under a quarter
    of a core over @window seconds; a good client is served once the silent
    ones leave."""
    held = []
    try:
        while len(held) < 400:
            c = Conn(addr, 2)
            try:
                c.recv(18)
            except (Closed, OSError):
                c.close()
                break  # the server could take no more
            held.append(c)
    except OSError:
        pass
    waiting = []
    for _ in range(pending):
        try:
            waiting.append(Conn(addr, 2))
        except OSError:
            break
    c0 = cpu_s(pid)
    t0 = time.monotonic()
    while time.monotonic() - t0 < window:
        time.sleep(0.1)
    used = cpu_s(pid) - c0
    wall = time.monotonic() - t0
    say("out of descriptors after %d connections, %d more waiting: %.2f s of CPU in %.1f s"
        % (len(held), len(waiting), used, wall))
    if used > wall / 4:
        fail("the server spins at EMFILE: %.2f s of CPU in %.1f s" % (used, wall))
    for c in held + waiting:
        c.close()
    wait_for(lambda: _try_roundtrip(addr), 15, "a good client served after the flood left")


def _try_roundtrip(addr):
    try:
        good_roundtrip(addr, 0, timeout=2)
        return True
    except (OSError, Closed, AssertionError):
        return False


def xfsz(addr, pid, limit):
    """Writes past ulimit -f fail with ENOSPC; the server lives on and a
    write below the limit still works."""
    c = Conn(addr)
    c.go()
    c.req(CMD_WRITE, limit + (1 << 20), 4096, 1, b"x" * 4096)
    err = c.response()[0]
    if err != ENOSPC:
        fail("a write past ulimit -f: error %d, not ENOSPC (28)" % err)
    if not alive(pid):
        fail("the server died")
    c.req(CMD_WRITE, 0, 4096, 2, b"y" * 4096)
    if c.response()[0]:
        fail("a write below the limit failed after one past it")
    c.req(CMD_READ, 0, 4096, 3)
    err, _, data = c.response(4096)
    if err or data != b"y" * 4096:
        fail("read back after EFBIG")
    say("write past ulimit -f: ENOSPC; server alive; writes below it work")


def refused_flood(addr, n):
    """@n connections, each closed as soon as the server has answered it."""
    for _ in range(n):
        try:
            c = Conn(addr, 5)
            c.hung_up(5)
            c.close()
        except OSError:
            pass


# ------------------------------------------------------------ the soak


class Soak:
    """Good clients verifying data and abusive ones, for @seconds."""

    def __init__(self, addr, pid, seconds, uri):
        self.addr, self.pid, self.seconds, self.uri = addr, pid, seconds, uri
        self.stop = threading.Event()
        self.errors = []
        self.good_ops = 0
        self.abuse_conns = 0
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def error(self, what):
        with self.lock:
            self.errors.append(what)
        self.stop.set()

    def good(self, base, seed):
        """Own 1 MiB at @base: write random extents, read them back."""
        rnd = __import__("random").Random(seed)
        shadow = bytearray(1 << 20)
        while not self.stop.is_set():
            try:
                c = Conn(self.addr, 10)
                c.go()
                for _ in range(rnd.randrange(5, 50)):
                    off = rnd.randrange(0, 256) * 4096
                    n = min(rnd.choice([4096, 65536, 262144]), (1 << 20) - off)
                    blob = os.urandom(n)
                    c.req(CMD_WRITE, base + off, n, 1, blob)
                    if c.response()[0]:
                        return self.error("good client: write failed")
                    shadow[off:off + n] = blob
                    off = rnd.randrange(0, 240) * 4096
                    c.req(CMD_READ, base + off, 65536, 2)
                    err, _, data = c.response(65536)
                    if err or data != shadow[off:off + 65536]:
                        return self.error("good client: data differs at %d" % (base + off))
                    with self.lock:
                        self.good_ops += 2
                c.close()
            except (OSError, Closed, AssertionError) as e:
                return self.error("good client: %r at %.1f s" % (e, time.monotonic() - self.t0))

    def libnbd_client(self, base):
        """The same through libnbd (python3-libnbd), if it is there."""
        try:
            import nbd
        except ImportError:
            return
        try:
            h = nbd.NBD()
            h.connect_uri(self.uri)
            while not self.stop.is_set():
                blob = os.urandom(1 << 20)
                h.pwrite(blob, base)
                if h.pread(1 << 20, base) != blob:
                    return self.error("libnbd client: data differs")
                with self.lock:
                    self.good_ops += 2
            h.shutdown()
        except nbd.Error as e:
            self.error("libnbd client: %s" % e)

    def abuse(self, kind, seed):
        rnd = __import__("random").Random(seed)
        held = []
        while not self.stop.is_set():
            try:
                c = Conn(self.addr, 5)
                with self.lock:
                    self.abuse_conns += 1
                if kind == "silent":
                    held.append(c)
                elif kind == "trickle":
                    c.recv(18)
                    c.send(b"\0")
                    held.append(c)
                elif kind == "nonreader":
                    c.go()
                    for i in range(32):
                        c.req(CMD_READ, i << 20, 1 << 20, i)
                    held.append(c)
                elif kind == "junk":
                    c.recv(18)
                    c.send(os.urandom(rnd.randrange(1, 200)))
                    c.close()
                elif kind == "vanish":
                    c.go()
                    c.req(CMD_WRITE, 48 << 20, 1 << 20, 1, b"v" * rnd.randrange(0, 1 << 19))
                    c.close()
            except (OSError, Closed, AssertionError):
                pass
            if len(held) > 40:
                for c in held[:20]:
                    c.close()
                del held[:20]
            self.stop.wait(rnd.random() * 0.05)
        for c in held:
            c.close()

    def run(self, rss_bound_mib):
        idle = rss_kib(self.pid)
        threads = [threading.Thread(target=self.good, args=((8 + i) << 20, i))
                   for i in range(4)]
        threads.append(threading.Thread(target=self.libnbd_client, args=(16 << 20,)))
        kinds = os.environ.get("RQ_SOAK_ABUSE", "silent,silent,trickle,nonreader,junk,vanish")
        for i, kind in enumerate(kinds.split(",")):
            threads.append(threading.Thread(target=self.abuse, args=(kind, i)))
        for t in threads:
            t.daemon = True
            t.start()
        peak = idle
        c0, t0 = cpu_s(self.pid), time.monotonic()
        self.t0 = t0
        while time.monotonic() - t0 < self.seconds and not self.stop.is_set():
            peak = max(peak, rss_kib(self.pid))
            time.sleep(0.2)
        cpu = cpu_s(self.pid) - c0
        wall = time.monotonic() - t0
        self.stop.set()
        for t in threads:
            t.join(15)
        say("soak %.0f s: %d good operations verified, %d abusive connections; "
            "RSS idle %d MiB, peak %d MiB (bound %d MiB); server CPU %.1f s"
            % (wall, self.good_ops, self.abuse_conns, idle // 1024, peak // 1024,
               rss_bound_mib, cpu))
        if self.errors:
            fail("; ".join(self.errors))
        if not alive(self.pid):
            fail("the server died")
        if self.good_ops < 10:
            fail("good clients were barely served: %d operations" % self.good_ops)
        if peak > rss_bound_mib * 1024:
            fail("RSS peaked at %d MiB, over %d MiB" % (peak // 1024, rss_bound_mib))
        if cpu > 2 * wall:
            fail("server CPU %.1f s in %.1f s" % (cpu, wall))
        # quiet afterwards: no spinning, memory back
        c0, t0 = cpu_s(self.pid), time.monotonic()
        while time.monotonic() - t0 < 2:
            time.sleep(0.1)
        quiet = cpu_s(self.pid) - c0
        say("after the soak: %.2f s of CPU in 2 s, RSS %d MiB" % (quiet, rss_kib(self.pid) // 1024))
        if quiet > 0.5:
            fail("the server keeps busy after the clients left: %.2f s in 2 s" % quiet)
        good_roundtrip(self.addr, 0)


SCENARIOS = {
    "memory": lambda a: memory(addr_of(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]),
                               int(a[5]), int(a[6])),
    "pressure": lambda a: pressure(addr_of(a[0]), int(a[1]), int(a[2]), float(a[3])),
    "idle-after-reads": lambda a: idle_after_reads(addr_of(a[0]), int(a[1]), int(a[2]),
                                                   int(a[3])),
    "lockout": lambda a: lockout(addr_of(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]),
                                 float(a[5])),
    "deadlines": lambda a: deadlines(addr_of(a[0]), float(a[1])),
    "per-client": lambda a: per_client(a[0], int(a[1]), int(a[2]), a[3] == "evict"),
    "emfile": lambda a: emfile(addr_of(a[0]), int(a[1]), int(a[2]), float(a[3])),
    "xfsz": lambda a: xfsz(addr_of(a[0]), int(a[1]), int(a[2])),
    "refused-flood": lambda a: refused_flood(addr_of(a[0]), int(a[1])),
    "soak": lambda a: Soak(addr_of(a[0]), int(a[1]), float(a[2]), a[3]).run(int(a[4])),
    "roundtrip": lambda a: good_roundtrip(addr_of(a[0]), int(a[1]) if len(a) > 1 else 0),
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](sys.argv[2:])
