# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Shared by the nbd_*.sh integration tests (sourced, not run): start and stop
# rqnbd on a unix socket in a private temporary directory, skip (77) when a
# client tool is missing, bound everything in time.  Every test kills its
# server on exit, whatever happens.
#
#   nbd_init RQNBD      check the binary, make $tmp, install the exit trap
#   nbd_start ARGS...   start rqnbd --unix $sock ARGS..., wait for the socket
#   nbd_stop            SIGTERM, wait (bounded), check exit status 0
#   need TOOL...        skip unless every TOOL is on PATH
#   rawnbd              write $tmp/rawnbd.py, a minimal NBD client in python3
#   $uri                nbd+unix:///?socket=$sock

nbd_pid=""
nbd_log=""

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; [ -n "$nbd_log" ] && [ -f "$nbd_log" ] && sed 's/^/rqnbd: /' "$nbd_log"; exit 1; }
need() { for t in "$@"; do command -v "$t" >/dev/null 2>&1 || skip "$t is not installed"; done; }

nbd_cleanup() {
	if [ -n "$nbd_pid" ]; then
		kill -9 "$nbd_pid" 2>/dev/null
		wait "$nbd_pid" 2>/dev/null
	fi
	[ -n "${tmp:-}" ] && rm -rf "$tmp"
}

nbd_init() {
	[ -x "$1" ] || { echo "FAIL: no rqnbd at $1"; exit 1; }
	rqnbd=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
	tmp=$(mktemp -d /tmp/rqnbd-test.XXXXXX)
	sock=$tmp/sock
	uri="nbd+unix:///?socket=$sock"
	nbd_log=$tmp/rqnbd.log
	trap nbd_cleanup EXIT
	trap 'exit 1' INT TERM
}

nbd_start() {
	rm -f "$sock"
	"$rqnbd" --unix "$sock" "$@" 2>>"$nbd_log" &
	nbd_pid=$!
	for _ in $(seq 100); do
		[ -S "$sock" ] && return 0
		kill -0 "$nbd_pid" 2>/dev/null || break
		sleep 0.05
	done
	fail "rqnbd did not start ($*)"
}

# nbd_stop: SIGTERM must drain, flush and exit 0 within 20 s.
nbd_stop() {
	local rc
	[ -n "$nbd_pid" ] || return 0
	kill -TERM "$nbd_pid"
	for _ in $(seq 200); do
		kill -0 "$nbd_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$nbd_pid" 2>/dev/null; then
		kill -9 "$nbd_pid"
		wait "$nbd_pid" 2>/dev/null
		nbd_pid=""
		fail "rqnbd did not stop within 20 s of SIGTERM"
	fi
	wait "$nbd_pid"
	rc=$?
	nbd_pid=""
	[ $rc = 0 ] || fail "rqnbd exited with $rc after SIGTERM"
	[ -e "$sock" ] && fail "rqnbd left its socket behind"
	return 0
}

# rawnbd: a small NBD client that can also misbehave (python3 stdlib only).
rawnbd() {
	cat >"$tmp/rawnbd.py" <<'EOF'
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A minimal NBD client for tests: fixed newstyle handshake, simple and
structured replies, and the means to send anything at all."""
import socket
import struct

INIT, OPTS, REP = 0x4E42444D41474943, 0x49484156454F5054, 0x3E889045565A9
REQ, SIMPLE, STRUCT = 0x25609513, 0x67446698, 0x668E33EF
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_INFO, OPT_GO, OPT_SR = 1, 2, 3, 6, 7, 8
REP_ACK, REP_SERVER, REP_INFO = 1, 2, 3
ERR_UNSUP, ERR_INVALID, ERR_UNKNOWN, ERR_TOO_BIG = (2**31 + n for n in (1, 3, 6, 9))
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM, CMD_CACHE, CMD_ZERO, CMD_BS = range(8)
FLAG_FUA, FLAG_NO_HOLE, FLAG_DF = 1, 2, 4
FLAG_READ_ONLY, FLAG_MULTI_CONN = 2, 256
EPERM, EIO, EINVAL, ENOSPC = 1, 5, 22, 28


class Closed(Exception):
    pass


class Conn:
    def __init__(self, path, timeout=10):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.structured = False

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
        while True:
            flags, typ, cookie, ln = struct.unpack(">HHQI", self.recv(16))
            payload = self.recv(ln)
            if typ == 1:
                data += payload[8:]
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
EOF
}
