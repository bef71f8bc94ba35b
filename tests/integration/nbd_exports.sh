#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Several exports in one rqnbd (--config): nbdinfo --list shows every one
# with its description and size; names select exports ("" the default
# one, a client's alias its export, an unknown name NBD_REP_ERR_UNKNOWN);
# each export keeps its own data and read-only flag; an export's
# max-connections is enforced (the next client gets NBD_REP_ERR_POLICY,
# and gets in once a place is free); "unnamed = refuse" turns away
# clients no [client] names while named ones get in.
#
# usage: nbd_exports.sh RQNBD    Skips (77) without nbdinfo or python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need nbdinfo python3
nbd_init "$1"
rawnbd

truncate -s 3M "$tmp/disk.img"
cat >"$tmp/a.conf" <<EOF
[export mem]
description = "scratch memory"
backend = memory 8M
max-connections = 1

[export disk]
description = "a file on disk"
backend = file $tmp/disk.img
front = sq
sched = cfq
default = yes

[export slow]
backend = paced 1000 2M
read-only = yes
sched = bfq

[group gold]
weight = 800

[client alice]
export = mem
group = gold
EOF
nbd_start --config "$tmp/a.conf"
u() { echo "nbd+unix:///$1?socket=$sock"; }

nbdinfo --list "$(u "")" >"$tmp/list" 2>&1 || fail "nbdinfo --list: $(cat "$tmp/list")"
[ "$(grep -c '^export=' "$tmp/list")" = 3 ] || fail "not 3 exports listed: $(cat "$tmp/list")"
# the default export comes first, then the others in the file's order
[ "$(grep '^export=' "$tmp/list" | tr '\n' ' ')" = 'export="disk": export="mem": export="slow": ' ] ||
	fail "order: $(grep '^export=' "$tmp/list")"
grep -A1 '^export="mem"' "$tmp/list" | grep -q "description: scratch memory" || fail "mem's description: $(cat "$tmp/list")"
grep -A1 '^export="disk"' "$tmp/list" | grep -q "description: a file on disk" || fail "disk's description"
grep -A1 '^export="slow"' "$tmp/list" | grep -q "description: rqnbd paced memory export" || fail "slow's description"
grep -A2 '^export="slow"' "$tmp/list" | grep -q "export-size: 2097152" || fail "slow's size: $(cat "$tmp/list")"
echo "nbdinfo --list shows the three exports"

size() { nbdinfo --size "$(u "$1")" 2>"$tmp/err"; }
[ "$(size "")" = 3145728 ] || fail "\"\" does not select the default export (disk)"
[ "$(size disk)" = 3145728 ] || fail "disk's size"
[ "$(size mem)" = 8388608 ] || fail "mem's size"
[ "$(size alice)" = 8388608 ] || fail "alias alice does not select mem: $(cat "$tmp/err")"
if size nope >/dev/null; then fail "an unknown name was served"; fi
grep -q "No such file\|unknown" "$tmp/err" || fail "unknown name: $(cat "$tmp/err")"
nbdinfo --json "$(u slow)" | grep -q '"is_read_only": true' || fail "slow is not read-only"
nbdinfo --json "$(u mem)" | grep -q '"is_read_only": false' || fail "mem is read-only"
echo "names select exports: \"\", names, aliases; unknown ones refused"

# each export its own data
nbd mem 'assert c.cmd(rawnbd.CMD_WRITE, 0, 4096, payload=b"M" * 4096)[0] == 0' || fail "write to mem"
nbd disk 'assert c.cmd(rawnbd.CMD_WRITE, 0, 4096, payload=b"D" * 4096)[0] == 0' || fail "write to disk"
nbd mem 'assert c.cmd(rawnbd.CMD_READ, 0, 4096) == (0, b"M" * 4096)' || fail "mem lost its data"
nbd "" 'assert c.cmd(rawnbd.CMD_READ, 0, 4096) == (0, b"D" * 4096)' || fail "disk lost its data"
[ "$(head -c 4096 "$tmp/disk.img" | tr -d D | wc -c)" = 0 ] || fail "disk's data is not in its file"
nbd slow 'assert c.cmd(rawnbd.CMD_WRITE, 0, 512, payload=b"S" * 512)[0] == rawnbd.EPERM' ||
	fail "slow took a write"
echo "exports keep their own data; the read-only one refuses writes"

# max-connections = 1 on mem: hold one, the next is refused, then let in
nbd mem "
import os, time
open('$tmp/held', 'w').close()
while not os.path.exists('$tmp/release'):
    time.sleep(0.05)
" &
holder=$!
for _ in $(seq 100); do [ -e "$tmp/held" ] && break; sleep 0.05; done
[ -e "$tmp/held" ] || fail "the first client did not connect"
r=$(go_error mem)
[ "$r" = 80000002 ] || fail "a second client of mem (max-connections 1) got '$r', not NBD_REP_ERR_POLICY"
if nbdinfo "$(u mem)" >/dev/null 2>&1; then fail "nbdinfo got mem (max-connections 1)"; fi
[ "$(go_error alice)" = 80000002 ] || fail "alias alice got around mem's limit"
[ "$(go_error nope)" = 80000006 ] || fail "an unknown name did not get NBD_REP_ERR_UNKNOWN"
nbdinfo "$(u disk)" >/dev/null 2>&1 || fail "the limit of mem held back disk"
touch "$tmp/release"
wait $holder || fail "the first client failed"
ok=0
for _ in $(seq 50); do nbdinfo "$(u mem)" >/dev/null 2>&1 && { ok=1; break; }; sleep 0.1; done
[ $ok = 1 ] || fail "mem refused after its client left"
echo "an export's max-connections is enforced with NBD_REP_ERR_POLICY"
nbd_stop

# unnamed = refuse: only named clients get in; listing still works
cat >"$tmp/b.conf" <<'EOF'
[server]
unnamed = refuse
[export mem]
backend = memory 1M
[client alice]
export = mem
EOF
nbd_start --config "$tmp/b.conf"
[ "$(go_error mem)" = 80000002 ] || fail "an unnamed client was not refused with NBD_REP_ERR_POLICY"
if nbdinfo "$(u "")" >/dev/null 2>&1; then fail "an unnamed client got in by \"\""; fi
nbdinfo "$(u alice)" >/dev/null 2>&1 || fail "named client alice refused"
nbdinfo --list "$(u "")" 2>/dev/null | grep -q '^export="mem"' || fail "listing refused"
nbd_stop
echo "unnamed = refuse refuses unnamed clients only"
