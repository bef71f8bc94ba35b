# SPDX-License-Identifier: LGPL-2.1-or-later
"""A minimal NBD client for tests: fixed newstyle handshake, simple and
structured replies, and the means to send anything at all."""
import socket
import struct

INIT, OPTS, REP = 0x4E42444D41474943, 0x49484156454F5054, 0x3E889045565A9
REQ, SIMPLE, STRUCT = 0x25609513, 0x67446698, 0x668E33EF
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_INFO, OPT_GO, OPT_SR = 1, 2, 3, 6, 7, 8
OPT_STARTTLS, OPT_LIST_META, OPT_SET_META = 5, 9, 10
REP_ACK, REP_SERVER, REP_INFO, REP_META = 1, 2, 3, 4
ERR_UNSUP, ERR_INVALID, ERR_UNKNOWN, ERR_TOO_BIG = (2**31 + n for n in (1, 3, 6, 9))
ERR_TLS_REQD = 2**31 + 5
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM, CMD_CACHE, CMD_ZERO, CMD_BS = range(8)
FLAG_FUA, FLAG_NO_HOLE, FLAG_DF, FLAG_REQ_ONE, FLAG_FAST_ZERO = 1, 2, 4, 8, 16
FLAG_READ_ONLY, FLAG_MULTI_CONN, FLAG_SEND_CACHE, FLAG_SEND_FAST_ZERO = 2, 256, 1024, 2048
EPERM, EIO, EINVAL, ENOSPC, ENOTSUP = 1, 5, 22, 28, 95
STATE_HOLE, STATE_ZERO = 1, 2


def meta_body(queries, name=b""):
    """The data of NBD_OPT_LIST/SET_META_CONTEXT."""
    b = struct.pack(">I", len(name)) + name + struct.pack(">I", len(queries))
    for q in queries:
        b += struct.pack(">I", len(q)) + q
    return b


M = 1 << 20
failures = []  # what check() found wrong


def check(cond, what):
    """Note a failed expectation and go on (finish() reports them)."""
    if not cond:
        failures.append(what)
        print("  not ok:", what, flush=True)


def finish(what):
    """Exit 1 if any check failed, else say ok."""
    import sys
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("ok:", what)


class Closed(Exception):
    pass


class Conn:
    def __init__(self, path, timeout=10):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.structured = False
        self.extents = []  # (context id, [(length, flags)...]) of the last reply

    def recv(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise Closed()
            b += c
        return b

    def send(self, b):
        self.s.sendall(b)

    def closed_by_server(self):
        """True if the server hangs up (EOF or reset) within the timeout."""
        try:
            while self.s.recv(65536):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def greet(self, cflags=3):
        magic, opts, hflags = struct.unpack(">QQH", self.recv(18))
        assert magic == INIT and opts == OPTS, "bad greeting"
        self.send(struct.pack(">I", cflags))
        return hflags

    def opt(self, opt, data=b""):
        self.send(struct.pack(">QII", OPTS, opt, len(data)) + data)

    def reply(self):
        magic, opt, typ, ln = struct.unpack(">QIII", self.recv(20))
        assert magic == REP, "bad option reply magic"
        return opt, typ, self.recv(ln)

    def replies(self):
        """Option replies up to the final one (ACK or an error)."""
        out = []
        while True:
            opt, typ, data = self.reply()
            out.append((typ, data))
            if typ != REP_SERVER and typ != REP_INFO:
                return out

    def go(self, name=b"", structured=False):
        if structured:
            self.opt(OPT_SR)
            assert self.replies()[-1][0] == REP_ACK
            self.structured = True
        self.opt(OPT_GO, struct.pack(">I", len(name)) + name + struct.pack(">HH", 1, 3))
        size = flags = None
        for typ, data in self.replies():
            if typ == REP_INFO and struct.unpack(">H", data[:2])[0] == 0:
                size, flags = struct.unpack(">QH", data[2:12])
            elif typ != REP_INFO and typ != REP_ACK:
                raise AssertionError("GO failed: %x" % typ)
        return size, flags

    def request(self, typ, offset=0, length=0, flags=0, cookie=1, payload=b""):
        self.send(struct.pack(">IHHQQI", REQ, flags, typ, cookie, offset, length) + payload)

    def response(self, length=0):
        """(error, cookie, data) of the next reply; reads carry length bytes."""
        magic = struct.unpack(">I", self.recv(4))[0]
        if magic == SIMPLE:
            err, cookie = struct.unpack(">IQ", self.recv(12))
            return err, cookie, (self.recv(length) if length and not err else b"")
        assert magic == STRUCT, "bad reply magic %x" % magic
        data, err = b"", 0
        self.extents = []
        while True:
            flags, typ, cookie, ln = struct.unpack(">HHQI", self.recv(16))
            payload = self.recv(ln)
            if typ == 1:
                data += payload[8:]
            elif typ == 5:
                ctx = struct.unpack(">I", payload[:4])[0]
                d = [struct.unpack(">II", payload[i:i + 8]) for i in range(4, len(payload), 8)]
                self.extents.append((ctx, d))
            elif typ & 0x8000:
                err = struct.unpack(">I", payload[:4])[0]
            if flags & 1:
                return err, cookie, data
            assert struct.unpack(">I", self.recv(4))[0] == STRUCT

    def cmd(self, typ, offset=0, length=0, flags=0, payload=b"", cookie=7):
        self.request(typ, offset, length, flags, cookie, payload)
        err, ck, data = self.response(length if typ == CMD_READ else 0)
        assert ck == cookie, "cookie %d for %d" % (ck, cookie)
        return err, data

    def meta(self, opt, queries, name=b""):
        """LIST or SET_META_CONTEXT: ([(id, name)...], final reply type)."""
        self.opt(opt, meta_body(queries, name))
        out = []
        while True:
            _, typ, data = self.reply()
            if typ != REP_META:
                return out, typ
            out.append((struct.unpack(">I", data[:4])[0], data[4:]))

    def starttls(self, cafile, hostname="localhost"):
        """NBD_OPT_STARTTLS, then TLS over the same socket (X.509, checked
        against cafile).  Returns the option's reply type."""
        import ssl
        self.opt(OPT_STARTTLS)
        _, typ, _ = self.reply()
        if typ != REP_ACK:
            return typ
        ctx = ssl.create_default_context(cafile=cafile)
        self.s = ctx.wrap_socket(self.s, server_hostname=hostname)
        return typ
