#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# TLS (NBD_OPT_STARTTLS over GnuTLS).  Certificates (a CA, a server
# certificate for localhost, a client certificate, and a second CA's client
# certificate) are made here with certtool, a PSK file with psktool.
#
#   --tls require, X.509: nbdinfo and nbdcopy (8 MiB there and back) over
#   TLS; a plain nbdinfo fails; a raw plain client gets NBD_REP_ERR_TLS_REQD
#   for every option but STARTTLS and ABORT, and NBD_OPT_EXPORT_NAME is hung
#   up on.  A raw TLS client (python ssl): STARTTLS with data is invalid,
#   a second STARTTLS inside TLS is invalid, then I/O of 1 MiB writes and
#   reads, block status.  Garbage instead of a TLS handshake, and silence
#   after STARTTLS (the handshake deadline), close only that connection.
#   --tls on, PSK: TLS and plain clients both served; the negotiation
#   before STARTTLS (structured replies) is forgotten after it; a wrong key
#   or an unknown user fails; nbdcopy with PSK.
#   --tls-verify-peer: a client certificate from the CA is taken, none or
#   one from another CA refused.
#   Bad usage exits 2, missing certificate files 1.
#
# usage: nbd_tls.sh RQNBD    Skips (77) without certtool, psktool, nbdinfo,
# nbdcopy or python3, or when rqnbd was built without GnuTLS.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need certtool psktool nbdinfo nbdcopy python3 cmp
nbd_init "$1"
rawnbd

# ------------------------------------------------------------------ usage
if "$rqnbd" --unix "$sock" --memory 1M --tls on 2>&1 | grep -q "without GnuTLS"; then
	skip "rqnbd was built without GnuTLS"
fi
usage() {
	local rc
	"$rqnbd" --unix "$sock" --memory 1M "$@" >/dev/null 2>"$tmp/usage.err"
	rc=$?
	[ $rc = 2 ] || fail "rqnbd $*: exit $rc, not 2"
	[ -s "$tmp/usage.err" ] || fail "rqnbd $*: no reason given"
}
usage --tls maybe
usage --tls on
usage --tls require --tls-certificates "$tmp" --tls-psk "$tmp/x"
usage --tls-psk "$tmp/x"
usage --tls on --tls-psk "$tmp/x" --tls-verify-peer
"$rqnbd" --unix "$sock" --memory 1M --tls on --tls-certificates "$tmp/nosuch" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "ca-cert.pem" "$tmp/err" || fail "missing certificates: exit $rc: $(cat "$tmp/err")"
[ -e "$sock" ] && fail "a failed start left its socket"

# ------------------------------------------------------------ credentials
pki=$tmp/pki srv=$tmp/srv cli=$tmp/cli other=$tmp/other
mkdir -p "$pki" "$srv" "$cli" "$other"
cert() { # cert NAME TEMPLATE-LINES... (signed by CA; CA when NAME is ca)
	local name=$1
	shift
	printf '%s\n' "$@" "expiration_days = 2" >"$pki/$name.info"
	certtool --generate-privkey --outfile "$pki/$name-key.pem" >/dev/null 2>&1 ||
		fail "certtool: private key"
	case $name in
	ca|ca2)
		certtool --generate-self-signed --load-privkey "$pki/$name-key.pem" \
			--template "$pki/$name.info" --outfile "$pki/$name-cert.pem" >/dev/null 2>&1 ;;
	*)
		local ca=${CA:-ca}
		certtool --generate-certificate --load-ca-certificate "$pki/$ca-cert.pem" \
			--load-ca-privkey "$pki/$ca-key.pem" --load-privkey "$pki/$name-key.pem" \
			--template "$pki/$name.info" --outfile "$pki/$name-cert.pem" >/dev/null 2>&1 ;;
	esac || fail "certtool: certificate $name"
}
cert ca "cn = rqnbd test CA" ca cert_signing_key
cert ca2 "cn = another CA" ca cert_signing_key
cert server "cn = localhost" "dns_name = localhost" "organization = rqnbd test" \
	tls_www_server encryption_key signing_key
cert client "cn = client1" "organization = rqnbd test" tls_www_client encryption_key signing_key
CA=ca2 cert stranger "cn = stranger" tls_www_client encryption_key signing_key
cp "$pki/ca-cert.pem" "$srv/ca-cert.pem"
cp "$pki/server-cert.pem" "$srv/server-cert.pem"
cp "$pki/server-key.pem" "$srv/server-key.pem"
cp "$pki/ca-cert.pem" "$cli/ca-cert.pem"
cp "$pki/client-cert.pem" "$cli/client-cert.pem"
cp "$pki/client-key.pem" "$cli/client-key.pem"
cp "$pki/ca-cert.pem" "$other/ca-cert.pem"
cp "$pki/stranger-cert.pem" "$other/client-cert.pem"
cp "$pki/stranger-key.pem" "$other/client-key.pem"
psktool -u alice -p "$tmp/keys.psk" >/dev/null 2>&1 || fail "psktool"
psktool -u bob -p "$tmp/keys.psk" >/dev/null 2>&1 || fail "psktool"
psktool -u alice -p "$tmp/wrong.psk" >/dev/null 2>&1 || fail "psktool"
psktool -u mallory -p "$tmp/mallory.psk" >/dev/null 2>&1 || fail "psktool"

tls_uri="nbds+unix:///?socket=$sock&tls-certificates=$cli"
psk_uri() { echo "nbds+unix://$1@/?socket=$sock&tls-psk-file=$2"; }
head -c 8M /dev/urandom >"$tmp/data"

# -------------------------------------------------- --tls require, X.509
nbd_start --memory 64M --tls require --tls-certificates "$srv" --handshake-timeout 3 \
	--stall-timeout 1
nbdinfo "$tls_uri" >"$tmp/info" 2>&1 || fail "nbdinfo over TLS: $(cat "$tmp/info")"
grep -q "with TLS" "$tmp/info" || fail "nbdinfo: not TLS: $(head -1 "$tmp/info")"
for cap in can_cache can_fast_zero can_zero can_trim can_fua can_multi_conn can_flush \
	base:allocation; do
	grep -q "$cap" "$tmp/info" || fail "nbdinfo over TLS: no $cap"
done
nbdinfo "$uri" >"$tmp/plain" 2>&1 && fail "a plain client was served under --tls require"
timeout 60 nbdcopy "$tmp/data" "$tls_uri" || fail "nbdcopy to rqnbd over TLS"
timeout 60 nbdcopy "$tls_uri" "$tmp/back" || fail "nbdcopy from rqnbd over TLS"
cmp -n $((8 << 20)) "$tmp/data" "$tmp/back" || fail "nbdcopy over TLS: data differ"

cat >"$tmp/tls.py" <<'PY'
# SPDX-License-Identifier: LGPL-2.1-or-later
import os, socket, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rawnbd import *

path, ca, mode = sys.argv[1], sys.argv[2], sys.argv[3]


def plain():
    c = Conn(path)
    c.greet()
    return c


def tls_closed(c):
    """The server closed a TLS connection (with or without close_notify)."""
    import ssl
    try:
        return c.closed_by_server()
    except (ssl.SSLError, OSError):
        return True


def require():
    c = plain()
    for opt, data, what in ((OPT_GO, struct.pack(">IH", 0, 0), "GO"),
                            (OPT_INFO, struct.pack(">IH", 0, 0), "INFO"),
                            (OPT_LIST, b"", "LIST"), (OPT_SR, b"", "STRUCTURED_REPLY"),
                            (OPT_LIST_META, meta_body([]), "LIST_META_CONTEXT"),
                            (OPT_SET_META, meta_body([b"base:allocation"]), "SET_META"),
                            (99, b"", "unknown option")):
        c.opt(opt, data)
        check(c.replies()[-1][0] == ERR_TLS_REQD, what + " in the clear: ERR_TLS_REQD")
    c.opt(OPT_ABORT)
    check(c.replies()[-1][0] == REP_ACK, "ABORT in the clear: ACK")
    c = plain()
    c.opt(OPT_EXPORT_NAME, b"")
    check(c.closed_by_server(), "EXPORT_NAME in the clear: hung up")

    c = plain()
    c.opt(OPT_STARTTLS, b"x")
    check(c.replies()[-1][0] == ERR_INVALID, "STARTTLS with data: ERR_INVALID")
    check(c.starttls(ca) == REP_ACK, "STARTTLS: ACK")
    c.opt(OPT_STARTTLS)
    check(c.replies()[-1][0] == ERR_INVALID, "STARTTLS twice: ERR_INVALID")
    c.opt(OPT_SR)
    c.replies()
    c.structured = True
    ctx, typ = c.meta(OPT_SET_META, [b"base:allocation"])
    check(typ == REP_ACK and ctx, "SET_META over TLS")
    size, _ = c.go()
    check(size == 64 * M, "GO over TLS")
    data = os.urandom(M)
    check(c.cmd(CMD_WRITE, 3 * M, M, payload=data)[0] == 0, "1 MiB write over TLS")
    err, back = c.cmd(CMD_READ, 3 * M, M)
    check(err == 0 and back == data, "1 MiB read over TLS")
    # many small requests in one go: replies gathered into records
    for i in range(64):
        c.request(CMD_READ, 3 * M + i * 4096, 4096, cookie=1000 + i)
    seen = set()
    for i in range(64):
        err, ck, d = c.response(4096)
        seen.add(ck)
        check(err == 0 and d == data[(ck - 1000) * 4096:(ck - 999) * 4096], "pipelined read")
    check(len(seen) == 64, "64 pipelined replies")
    err, _ = c.cmd(CMD_BS, 3 * M, M)
    check(err == 0 and c.extents == [(1, [(M, 0)])], "block status over TLS")
    err, _ = c.cmd(CMD_BS, 32 * M, M)
    check(err == 0 and c.extents == [(1, [(M, 3)])], "block status of a hole over TLS")
    c.request(CMD_DISC)

    # a storm of random requests over TLS (seeded): every one answered
    import random
    rnd = random.Random(14)
    c = plain()
    c.starttls(ca)
    c.opt(OPT_SR)
    c.replies()
    c.structured = True
    c.meta(OPT_SET_META, [b"base:allocation"])
    c.go()
    want = set()
    for i in range(300):
        typ = rnd.choice([CMD_READ, CMD_WRITE, CMD_FLUSH, CMD_TRIM, CMD_CACHE, CMD_ZERO,
                          CMD_BS, 8, 9, 200])
        off = rnd.choice([0, 512, 4096, rnd.randrange(0, 64 * M, 512), 64 * M, 2**63,
                          rnd.randrange(0, 2**64)])
        ln = rnd.choice([0, 512, 4096, 65536, rnd.randrange(0, 1 << 17), 64 * M + 512])
        flags = rnd.choice([0, 0, FLAG_FUA, FLAG_REQ_ONE, FLAG_FAST_ZERO, FLAG_DF,
                            rnd.randrange(0, 1 << 16)])
        if typ == CMD_WRITE:
            ln = min(ln, 1 << 17)
        c.request(typ, off, ln, flags, cookie=5000 + i,
                  payload=os.urandom(ln) if typ == CMD_WRITE else b"")
        want.add(5000 + i)
    got = set()
    for i in range(300):
        err, ck, _ = c.response()
        got.add(ck)
        check(err in (0, EINVAL, ENOSPC, ENOTSUP, EPERM), "storm: error %d" % err)
    check(got == want, "storm over TLS: every request answered once")
    check(c.cmd(CMD_READ, 0, 4096)[0] == 0, "a read after the storm")
    c.request(CMD_DISC)

    # garbage instead of a TLS handshake: that connection goes
    c = plain()
    c.opt(OPT_STARTTLS)
    check(c.replies()[-1][0] == REP_ACK, "STARTTLS then garbage: ACK")
    c.send(os.urandom(4096))
    check(c.closed_by_server(), "garbage TLS: hung up")
    # a TLS record header with an absurd length
    c = plain()
    c.opt(OPT_STARTTLS)
    c.replies()
    c.send(b"\x16\x03\x01\xff\xff" + b"\0" * 100)
    check(c.closed_by_server(), "bad TLS record: hung up")
    # the rate check holds over TLS: a write payload that stops coming
    c = plain()
    check(c.starttls(ca) == REP_ACK, "STARTTLS for the stall")
    c.go()
    c.request(CMD_WRITE, 0, M, cookie=9, payload=b"\0" * 1000)
    c.s.settimeout(30)
    check(tls_closed(c), "a stalled write payload over TLS: closed by the rate check")
    # silence after STARTTLS: the handshake deadline (3 s) closes it
    c = plain()
    c.s.settimeout(30)
    c.opt(OPT_STARTTLS)
    c.replies()
    check(c.closed_by_server(), "silent TLS handshake: closed at the deadline")


def on():
    # plain clients are served; what was negotiated before STARTTLS is gone
    c = plain()
    c.opt(OPT_SR)
    check(c.replies()[-1][0] == REP_ACK, "SR in the clear under --tls on")
    check(c.meta(OPT_SET_META, [b"base:allocation"])[1] == REP_ACK, "SET_META in the clear")
    check(c.starttls(ca) == REP_ACK, "STARTTLS after SR")
    size, flags = c.go()
    check(size == 64 * M, "GO after STARTTLS")
    c.request(CMD_BS, 0, 4096, cookie=5)
    magic = struct.unpack(">I", c.recv(4))[0]
    check(magic == SIMPLE, "structured replies forgotten after STARTTLS")
    err, ck = struct.unpack(">IQ", c.recv(12))
    check(err == EINVAL and ck == 5, "meta context forgotten after STARTTLS: EINVAL")
    c.request(CMD_DISC)


if mode == "require":
    require()
else:
    on()
finish("tls " + mode)
PY
# qemu's NBD client (its own GnuTLS session and block status), when there
if command -v qemu-img >/dev/null; then
	qobj="tls-creds-x509,id=tls0,endpoint=client,dir=$cli"
	qimg="driver=nbd,path=$sock,tls-creds=tls0,tls-hostname=localhost"
	head -c 4M /dev/urandom >"$tmp/q.img"
	timeout 60 qemu-img convert -n --object "$qobj" --target-image-opts "$tmp/q.img" "$qimg" ||
		fail "qemu-img convert over TLS"
	timeout 60 nbdcopy "$tls_uri" "$tmp/qback" || fail "nbdcopy after qemu-img"
	cmp -n $((4 << 20)) "$tmp/q.img" "$tmp/qback" || fail "qemu-img over TLS: data differ"
	timeout 60 qemu-img map --output=json --object "$qobj" --image-opts "$qimg" >"$tmp/qmap" ||
		fail "qemu-img map over TLS"
	# data where nbdcopy and qemu-img wrote (8 MiB), a zero hole after it
	grep -q '"start": 0, "length": 8388608, .*"zero": false, "data": true' "$tmp/qmap" &&
		grep -q '"start": 8388608, .*"zero": true, "data": false' "$tmp/qmap" ||
		fail "qemu-img map over TLS: $(cat "$tmp/qmap")"
fi
timeout 120 python3 "$tmp/tls.py" "$sock" "$srv/ca-cert.pem" require || fail "raw TLS clients"
nbdinfo "$tls_uri" >/dev/null 2>&1 || fail "nbdinfo over TLS after the hostile clients"
nbd_stop
grep -Eq " ([2-9]|[1-9][0-9]+) timed out" "$nbd_log" || fail "stall and silent handshake not both timed out: $(tail -1 "$nbd_log")"

# ------------------------------------------------------ --tls on, PSK
nbd_start --memory 64M --tls on --tls-psk "$tmp/keys.psk"
nbdinfo "$(psk_uri alice "$tmp/keys.psk")" >"$tmp/info" 2>&1 || fail "PSK alice: $(cat "$tmp/info")"
grep -q "with TLS" "$tmp/info" || fail "PSK: not TLS"
nbdinfo "$(psk_uri bob "$tmp/keys.psk")" >/dev/null 2>&1 || fail "PSK bob"
nbdinfo "$uri" >"$tmp/info" 2>&1 || fail "plain client under --tls on: $(cat "$tmp/info")"
grep -q "without TLS" "$tmp/info" || fail "plain client: $(head -1 "$tmp/info")"
nbdinfo "$(psk_uri alice "$tmp/wrong.psk")" >/dev/null 2>&1 && fail "a wrong PSK was taken"
nbdinfo "$(psk_uri mallory "$tmp/mallory.psk")" >/dev/null 2>&1 && fail "an unknown PSK user was taken"
timeout 60 nbdcopy "$tmp/data" "$(psk_uri alice "$tmp/keys.psk")" || fail "nbdcopy with PSK"
timeout 60 nbdcopy "$uri" "$tmp/back2" || fail "nbdcopy plain under --tls on"
cmp -n $((8 << 20)) "$tmp/data" "$tmp/back2" || fail "PSK write, plain read: data differ"
nbd_stop

nbd_start --memory 64M --tls on --tls-certificates "$srv"
timeout 60 python3 "$tmp/tls.py" "$sock" "$srv/ca-cert.pem" on || fail "STARTTLS resets"
nbd_stop

# ----------------------------------------------- --tls-verify-peer (X.509)
nbd_start --memory 64M --tls require --tls-certificates "$srv" --tls-verify-peer
nbdinfo "$tls_uri" >"$tmp/info" 2>&1 || fail "client certificate refused: $(cat "$tmp/info")"
nbdinfo "nbds+unix:///?socket=$sock&tls-certificates=$srv" >/dev/null 2>&1 &&
	fail "a client without a certificate was taken"
nbdinfo "nbds+unix:///?socket=$sock&tls-certificates=$other" >/dev/null 2>&1 &&
	fail "a client certificate from another CA was taken"
nbd_stop
echo "ok: TLS (X.509, PSK, require, on, verify-peer)"
