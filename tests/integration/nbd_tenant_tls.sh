#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Tenants named by TLS identity (--config with --tls): a [client] with
# "tls-identity = alice" matches the client that proved, with its PSK, to
# be alice, and only that client: alice gets her export; bob, whose key is
# good but whom no [client] names, is refused under "unnamed = refuse"; a
# plain client (--tls on) has no identity and is refused too; an
# export-name alias does not stand in for the identity.  With
# "unnamed = own" bob gets in.
#
# usage: nbd_tenant_tls.sh RQNBD    Skips (77) without psktool or nbdinfo,
# or when rqnbd was built without GnuTLS.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need psktool nbdinfo
nbd_init "$1"
"$rqnbd" --tls on --tls-psk /dev/null --help >/dev/null 2>&1 ||
	skip "rqnbd was built without GnuTLS"
psktool -u alice -p "$tmp/keys.psk" >/dev/null 2>&1 || fail "psktool"
psktool -u bob -p "$tmp/keys.psk" >/dev/null 2>&1 || fail "psktool"
psk_uri() { echo "nbds+unix://$1@/$2?socket=$sock&tls-psk-file=$tmp/keys.psk"; }
plain_uri() { echo "nbd+unix:///$1?socket=$sock"; }

conf() {
	cat >"$tmp/t.conf" <<EOF
[server]
unnamed = $1
[export secret]
backend = memory 2M
[export open]
backend = memory 1M
default = yes
[group gold]
weight = 800
[client alice]
tls-identity = alice
export = secret
group = gold
EOF
}

conf refuse
nbd_start --config "$tmp/t.conf" --tls on --tls-psk "$tmp/keys.psk"
[ "$(nbdinfo --size "$(psk_uri alice secret)" 2>"$tmp/err")" = 2097152 ] ||
	fail "alice (PSK identity named in the file) did not get export secret: $(cat "$tmp/err")"
if nbdinfo --size "$(psk_uri bob secret)" >/dev/null 2>"$tmp/err"; then
	fail "bob (a good key, named nowhere) got in under unnamed = refuse"
fi
if nbdinfo --size "$(plain_uri secret)" >/dev/null 2>&1; then
	fail "a plain client (no TLS identity) got export secret"
fi
if nbdinfo --size "$(plain_uri alice)" >/dev/null 2>&1; then
	fail "a plain client got in by naming the client alice"
fi
echo "a [client] matched by TLS identity: alice in, bob and plain clients refused"
nbd_stop

conf own
nbd_start --config "$tmp/t.conf" --tls on --tls-psk "$tmp/keys.psk"
[ "$(nbdinfo --size "$(psk_uri bob open)" 2>"$tmp/err")" = 1048576 ] ||
	fail "bob refused under unnamed = own: $(cat "$tmp/err")"
[ "$(nbdinfo --size "$(psk_uri alice secret)" 2>"$tmp/err")" = 2097152 ] ||
	fail "alice lost her export under unnamed = own: $(cat "$tmp/err")"
nbd_stop
echo "unnamed = own lets bob in on his own io context"
