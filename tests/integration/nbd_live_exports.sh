#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Exports added and removed by a reload (SIGHUP) while rqnbd serves:
#   - an export new in the file is listed and served at once (data written
#     through nbdcopy reads back), with its own trace (--trace) and iostat
#     lines
#   - an export gone from the file is no longer listed, a new client asking
#     for it gets NBD_REP_ERR_UNKNOWN, but a client already on it keeps
#     being served (its data reads back after the reload); when it leaves
#     the export is closed ("removed (final flush OK)")
#   - its slot is used again: the export added back is a new, empty one
#   - the default export cannot be removed live (said, kept); a new export
#     whose device cannot be set up changes nothing (said)
#
# usage: nbd_live_exports.sh RQNBD    Skips (77) without nbdinfo, nbdcopy or python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need nbdinfo nbdcopy python3
nbd_init "$1"
rawnbd
u() { echo "nbd+unix:///$1?socket=$sock"; }
listed() { nbdinfo --list "$(u "")" 2>/dev/null | sed -n 's/^export="\(.*\)":$/\1/p' | tr '\n' ' '; }
reload() { kill -HUP "$nbd_pid"; wait_log "$1"; }

mkdir "$tmp/trace"
cat >"$tmp/a.conf" <<'EOF'
[export one]
backend = memory 4M
default = yes

[export two]
backend = memory 4M
EOF
nbd_start --config "$tmp/a.conf" --trace "$tmp/trace" --iostat 1
[ "$(listed)" = "one two " ] || fail "listed at start: $(listed)"

# a client on two that stays through the reload
nbd two "
import os, time
assert c.cmd(rawnbd.CMD_WRITE, 0, 4096, payload=b'T' * 4096)[0] == 0
open('$tmp/held', 'w').close()
while not os.path.exists('$tmp/release'):
    time.sleep(0.05)
assert c.cmd(rawnbd.CMD_READ, 0, 4096) == (0, b'T' * 4096), 'two lost its data'
assert c.cmd(rawnbd.CMD_WRITE, 4096, 4096, payload=b'U' * 4096)[0] == 0
" &
holder=$!
for _ in $(seq 100); do [ -e "$tmp/held" ] && break; sleep 0.05; done
[ -e "$tmp/held" ] || fail "the client of two did not connect"

# remove two, add three
cat >"$tmp/a.conf" <<'EOF'
[export one]
backend = memory 4M
default = yes

[export three]
description = "added live"
backend = memory 2M
sched = mq-deadline
EOF
reload '^rqnbd: reloaded '
grep -q "^rqnbd: reload: export 'three' added" "$nbd_log" || fail "three not said added"
grep -q "^rqnbd: reload: export 'two' is not in the file: no longer listed or opened; its 1 client stays" \
	"$nbd_log" || fail "two's removal not said with its 1 client"
[ "$(listed)" = "one three " ] || fail "listed after the reload: $(listed)"
[ "$(go_error two)" = 80000006 ] || fail "a new client of two did not get NBD_REP_ERR_UNKNOWN"
[ "$(nbdinfo --size "$(u three)")" = 2097152 ] || fail "three's size"
head -c $((2 << 20)) /dev/urandom >"$tmp/data"
nbdcopy "$tmp/data" "$(u three)" || fail "nbdcopy into three"
nbdcopy "$(u three)" "$tmp/back" || fail "nbdcopy out of three"
cmp "$tmp/data" "$tmp/back" || fail "three's data read back differs"
echo "a reload adds three (served at once) and takes two off the list"

# the client of two is still served; when it leaves, two closes
grep -q "^rqnbd: export 'two' removed" "$nbd_log" && fail "two closed while a client had it"
touch "$tmp/release"
wait $holder || fail "the client of two was not served after the reload"
wait_log "^rqnbd: export 'two' removed \(final flush OK\)"
grep -q "^rqnbd: trace $tmp/trace/rqnbd-two: [1-9][0-9]* events, 0 dropped" "$nbd_log" ||
	fail "two's trace not ended with its totals"
echo "two's client kept being served; two closed when it left"

# two added back: a new, empty export (in the slot two left)
cat >>"$tmp/a.conf" <<'EOF'

[export two]
backend = memory 4M
EOF
reload "^rqnbd: reload: export 'two' added"
[ "$(listed)" = "one two three " ] || fail "listed with two back: $(listed)"
nbd two 'assert c.cmd(rawnbd.CMD_READ, 0, 4096) == (0, bytes(4096)), "two came back with old data"' ||
	fail "two added back is not a new empty export"
echo "two added back is a new export"

# what a reload cannot do changes nothing
sed -i 's/^\[export one\]/[export uno]/' "$tmp/a.conf"
reload "export 'one' is the default export: it cannot be removed live: kept"
grep -q "export 'uno' is new: it cannot become the default export live (the default stays 'one')" \
	"$nbd_log" || fail "uno made default not said"
[ "$(listed)" = "one two three uno " ] || fail "listed after removing the default: $(listed)"
[ "$(nbdinfo --size "$(u "")")" = 4194304 ] && nbd "" 'assert c.cmd(rawnbd.CMD_READ, 0, 4096)[0] == 0' ||
	fail "\"\" no longer selects one"
sed -i 's/^\[export uno\]/[export one]/' "$tmp/a.conf"
reload "^rqnbd: export 'uno' removed \(final flush OK\)"
[ "$(listed)" = "one two three " ] || fail "listed after uno left: $(listed)"
cat >>"$tmp/a.conf" <<EOF

[export bad]
backend = file $tmp/no/such/file
EOF
reload "a new export cannot be served; nothing changed"
[ "$(listed)" = "one two three " ] || fail "listed after a bad new export: $(listed)"
echo "the default export stays; a new export that cannot be set up changes nothing"

wait_log '^rqnbd: three: iostat +[0-9.]+ '
nbd_stop
(cd "$tmp/trace" && blkparse -i rqnbd-three >"$tmp/parsed" 2>&1) || fail "blkparse rqnbd-three"
sectors=$(awk '$6 == "C" && $7 ~ /W/ && $9 == "+" { n += $10 } END { print n + 0 }' "$tmp/parsed")
[ "$sectors" = 4096 ] || fail "blkparse rqnbd-three: $sectors sectors written, 2 MiB is 4096"
echo "ok: exports added and removed live"
