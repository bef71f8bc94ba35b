#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rqnbd --config: the parser of nbd_config.c through the program.  A good
# file is read (--check-config prints what it serves, the default export
# first); each bad file is refused with exit 2 and exactly one line
# "FILE:LINE: reason" naming the line at fault and why; a tunable the
# queue refuses is refused the same way at start-up; --config does not mix
# with the one-export options.
#
# usage: nbd_config.sh RQNBD    Needs nothing but rqnbd.
set -u
. "$(dirname "$0")/nbd_lib.sh"
nbd_init "$1"

good=$tmp/good.conf
cat >"$good" <<'EOF'
# a comment
; another
[server]
unix = /tmp/never-used.sock
unnamed = group guests
max-connections = 100

[export scratch]
backend = memory 16M
front = sq
sched = cfq
iosched.slice_idle = 0

[export disk0]
description = "the shared disk"
backend = paced 500 64M
sched = bfq
attr.nr_requests = 64
default = yes

[group gold]
weight = 1000
[group guests]
weight = 50

[client alice]
export = disk0
group = gold
class = rt
level = 2
weight = 500
[client bob]
alias = bob-disk
tls-identity = CN=bob
export = scratch
EOF
out=$("$rqnbd" --config "$good" --check-config) || fail "good file refused: $out"
echo "$out" | head -1 | grep -q "^export disk0: paced 67108864 bytes, front mq, scheduler bfq, 1 tunables, default$" ||
	fail "the default export is not listed first: $out"
echo "$out" | grep -q "^export scratch: memory 16777216 bytes, front sq, scheduler cfq, 1 tunables$" || fail "scratch: $out"
echo "$out" | grep -q "^client alice: alias alice, tls-identity -, export disk0, group gold, class rt/2, weight 500$" ||
	fail "alice: $out"
echo "$out" | grep -q "^client bob: alias bob-disk, tls-identity CN=bob, export scratch, group -, class be/4, weight 0$" ||
	fail "bob: $out"
echo "$out" | grep -q "^unnamed clients: group guests$" || fail "unnamed: $out"
echo "a good file is read"

# bad LINE REASON: the file on stdin is refused with "FILE:LINE: ...REASON..."
n=0
bad() {
	local line=$1 reason=$2 f rc
	n=$((n + 1))
	f=$tmp/bad$n.conf
	cat >"$f"
	"$rqnbd" --config "$f" --check-config >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "bad file $n: exit $rc, not 2: $(cat "$tmp/err")"
	[ "$(wc -l <"$tmp/err")" = 1 ] || fail "bad file $n: not one line: $(cat "$tmp/err")"
	grep -qF "$f:$line: " "$tmp/err" || fail "bad file $n: not at line $line: $(cat "$tmp/err")"
	grep -qF -- "$reason" "$tmp/err" || fail "bad file $n: '$(cat "$tmp/err")' lacks '$reason'"
	[ -s "$tmp/out" ] && fail "bad file $n: printed a configuration"
	return 0
}
ok_export='[export e]
backend = memory 1M'

bad 1 "no [export NAME] section" </dev/null
bad 2 "before any [section]" <<<"# top
backend = memory 1M"
bad 1 "unknown section [exprot]" <<<"[exprot e]"
bad 1 "section header without ']'" <<<"[export e"
bad 1 "[export]: needs a NAME" <<<"[export]"
bad 3 "expected 'key = value'" <<<"$ok_export
just words"
bad 3 "unknown key 'sched_name' in [export e]" <<<"$ok_export
sched_name = bfq"
bad 2 "backend: memory size '1000' is not a multiple of 512" <<<"[export e]
backend = memory 1000"
bad 2 "backend: memory size '17T'" <<<"[export e]
backend = memory 17T"
bad 2 "is not memory SIZE, file PATH or paced IOPS SIZE" <<<"[export e]
backend = tape /dev/st0"
bad 2 "backend: paced IOPS '0'" <<<"[export e]
backend = paced 0 1M"
bad 1 "[export e]: no backend" <<<"[export e]
read-only = yes"
bad 3 "read-only: 'maybe' is not yes or no" <<<"$ok_export
read-only = maybe"
bad 3 "front: 'dq' is not mq or sq" <<<"$ok_export
front = dq"
bad 3 "queues: '0' is not a number from 1 to 64" <<<"$ok_export
queues = 0"
bad 3 "depth: '12x' is not a number from 1 to 4096" <<<"$ok_export
depth = 12x"
bad 4 "iosched/slice_idle: given twice (line 3)" <<<"$ok_export
iosched.slice_idle = 0
attr.iosched/slice_idle = 1"
bad 3 "export 'e' defined twice" <<<"$ok_export
[export e]"
bad 4 "[export f]: a second default export (the first: e, line 1)" <<<"$ok_export
default = yes
[export f]
backend = memory 1M
default = yes"
bad 5 "weight: '0' is not a number from 1 to 1000" <<<"$ok_export
[group g]

weight = 0"
bad 5 "weight: '1001'" <<<"$ok_export
[group g]
weight = 100
weight = 1001"
bad 5 "group 'g' defined twice" <<<"$ok_export
[group g]
weight = 100
[group g]"
bad 3 "[client c]: no export 'nope'" <<<"$ok_export
[client c]
export = nope"
bad 3 "[client c]: no group 'gold'" <<<"$ok_export
[client c]
group = gold"
bad 3 "[client c]: alias 'e' is an export's name" <<<"$ok_export
[client c]
alias = e"
bad 5 "[client d]: alias 'x' taken by client c (line 3)" <<<"$ok_export
[client c]
alias = x
[client d]
alias = x"
bad 5 "class: 'realtime' is not rt, be or idle" <<<"$ok_export
[client c]
export = e
class = realtime"
bad 5 "level: '8' is not a number from 0 to 7" <<<"$ok_export
[client c]
class = be
level = 8"
bad 2 "unnamed: 'deny' is not own, refuse or group NAME" <<<"[server]
unnamed = deny
$ok_export"
bad 2 "unnamed: no group 'guests'" <<<"[server]
unnamed = group guests
$ok_export"
bad 2 "port: '70000' is not a port number" <<<"[server]
port = 70000
$ok_export"
bad 3 "port: [server] listens on unix or port, not both" <<<"[server]
unix = /tmp/x.sock
port = 10809"
bad 2 "unix: 'rel.sock' is not an absolute path" <<<"[server]
unix = rel.sock"
printf '[export e]\nbackend = memory 1M\ndescription = a\0b\n' >"$tmp/nul.conf"
"$rqnbd" --config "$tmp/nul.conf" --check-config 2>"$tmp/err" >/dev/null
[ $? = 2 ] && grep -qF "$tmp/nul.conf:3: a NUL byte" "$tmp/err" || fail "NUL byte: $(cat "$tmp/err")"
echo "$n bad files refused with their line and reason"

# the file cannot be read
"$rqnbd" --config "$tmp/none.conf" 2>"$tmp/err"
[ $? = 2 ] && grep -q "none.conf: cannot read: No such file" "$tmp/err" || fail "missing file: $(cat "$tmp/err")"
# one-export options do not mix with a file
timeout 5 "$rqnbd" --config "$good" --memory 1M 2>"$tmp/err"
[ $? = 2 ] && grep -q "exports come from the file" "$tmp/err" || fail "--config --memory: $(cat "$tmp/err")"
timeout 5 "$rqnbd" --check-config 2>"$tmp/err"
[ $? = 2 ] && grep -q "goes with --config" "$tmp/err" || fail "--check-config alone: $(cat "$tmp/err")"
# a [server] without a socket, and none on the command line
printf '%s\n' "$ok_export" >"$tmp/nosock.conf"
timeout 5 "$rqnbd" --config "$tmp/nosock.conf" 2>"$tmp/err"
[ $? = 2 ] && grep -q "needs exactly one of unix and port" "$tmp/err" || fail "no socket: $(cat "$tmp/err")"
"$rqnbd" --config "$tmp/nosock.conf" --check-config >/dev/null || fail "--check-config wants a socket"
echo "usage errors refused"

# a tunable or scheduler the queue refuses: exit 2 at start-up, its line named
printf '%s\niosched.no_such_tunable = 1\n' "$ok_export" >"$tmp/tun.conf"
timeout 10 "$rqnbd" --config "$tmp/tun.conf" --unix "$tmp/s1" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "bad tunable: exit $rc: $(cat "$tmp/err")"
grep -qF "$tmp/tun.conf:3: iosched/no_such_tunable = 1: the queue refuses it" "$tmp/err" ||
	fail "bad tunable: $(cat "$tmp/err")"
[ -e "$tmp/s1" ] && fail "bad tunable: the socket was made"
printf '%s\nsched = nosuch\n' "$ok_export" >"$tmp/sch.conf"
timeout 10 "$rqnbd" --config "$tmp/sch.conf" --unix "$tmp/s2" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "export e with scheduler nosuch" "$tmp/err" || fail "bad scheduler: exit $rc: $(cat "$tmp/err")"
echo "tunables and schedulers the queue refuses are refused at start-up"
