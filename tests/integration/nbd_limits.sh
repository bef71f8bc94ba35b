#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Every size and count option has bounds and a clear error (exit 2, one
# line naming the option and the allowed range); sizes are decimal
# ("010M" is 10 MiB, never octal 8 MiB).  And log lines do not flood:
# 2000 refused connections give at most a handful of lines and a summary
# "N more refused connections in the last S s".
#
# usage: nbd_limits.sh RQNBD    Skips (77) without python3 or nbdinfo.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3 nbdinfo
nbd_init "$1"

# refused ARGS... WORD: exit 2, one line on stderr containing WORD
refused() {
	local word=${*: -1} rc
	set -- "${@:1:$#-1}"
	timeout 5 "$rqnbd" --unix "$tmp/never" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "rqnbd $*: exit $rc, not 2"
	[ "$(wc -l <"$tmp/err")" = 1 ] || fail "rqnbd $*: not one line: $(cat "$tmp/err")"
	grep -q -- "$word" "$tmp/err" || fail "rqnbd $*: '$(cat "$tmp/err")' lacks '$word'"
	[ -e "$tmp/never" ] && fail "rqnbd $*: made its socket"
	return 0
}
refused --memory 1M --depth 65536 "--depth: 65536 is out of range (allowed: 1 to 4096)"
refused --memory 1M --depth 0 "--depth"
refused --memory 1M --queues 65 "--queues: 65 is out of range"
refused --memory 1M --queues 64 --depth 4096 "more than 16384 requests"
refused --memory 17T "--memory: 17T is out of range"
refused --memory 1000 "not a multiple of 512"
refused --memory -1M "--memory"
refused --memory 1M --max-connections 0 "--max-connections"
refused --memory 1M --max-connections 5000 "--max-connections"
refused --memory 1M --reserve 256 "must be below --max-connections"
refused --memory 1M --conn-buffer 1K "--conn-buffer: 1K is out of range"
refused --memory 1M --conn-buffer 2G "--conn-buffer"
refused --memory 1M --conn-buffer 16M --buffer-total 8M "below --conn-buffer"
refused --memory 1M --conn-requests 2000 "--conn-requests"
refused --memory 1M --handshake-timeout 0 "--handshake-timeout"
refused --memory 1M --idle-timeout 1e3 "--idle-timeout"
refused --memory 1M --min-rate 0 "--min-rate"
refused --file x --read-only --lock exclusive "needs a writable export"
refused --memory 1M --lock sometimes "--lock"
"$rqnbd" --help | grep -q -- "--conn-buffer SIZE.*64K to 1G" || fail "--help does not state the limits"
echo "bad values refused with their range"

for v in 010M 08M 0x10M; do
	nbd_start --memory "$v"
	got=$(nbdinfo --size "$uri")
	case $v in
	010M) want=10485760 ;; 08M) want=8388608 ;; 0x10M) want=16777216 ;;
	esac
	[ "$got" = "$want" ] || fail "--memory $v serves $got bytes, not $want"
	nbd_stop
done
echo "010M is 10 MiB, 08M is 8 MiB"

nbd_start --memory 1M --max-connections 4 --reserve 0
python3 -c '
import sys; sys.path.insert(0, sys.argv[1])
from nbd_abuse import Conn, refused_flood
held = [Conn(sys.argv[2]) for _ in range(4)]
for c in held: c.recv(18)
refused_flood(sys.argv[2], 2000)
' "$(dirname "$0")" "$sock" || fail "the flood client failed"
nbd_stop
lines=$(grep -c "refused a connection" "$nbd_log")
grep -q "more refused connections in the last [0-9]* s" "$nbd_log" || fail "no summary line"
sum=$(sed -n 's/.*rqnbd: \([0-9]*\) more refused connections.*/\1/p' "$nbd_log" | awk '{ s += $1 } END { print s }')
[ "$lines" -le 20 ] || fail "$lines lines for 2000 refused connections"
[ $((lines + sum)) = 2000 ] || fail "$lines lines + $sum summarised is not 2000"
echo "ok: 2000 refused connections: $lines lines and a summary of $sum"
