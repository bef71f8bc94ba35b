#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# SIGHUP under load: two fio clients write with verification (crc32c,
# verify_backlog: every block written is read back and checked while the
# run goes on) to two exports, one on each front end, while the
# configuration file is changed and rqnbd reloads it five times: schedulers
# switched live (none -> mq-deadline -> bfq -> kyber -> none on mq; cfq ->
# deadline -> noop -> cfq on sq), tunables and group weights changed, a bad
# file in the middle (reported with its line, nothing changed), then a file
# that adds an export (served) and resizes one (reported, skipped), then
# one without the added export (removed).  Nothing may be
# lost: both fio runs end with no error and no verify failure, no
# connection is dropped, rqnbd answers no request with an error.
#
# usage: nbd_reload.sh RQNBD    Skips (77) without fio and its nbd engine.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need fio
fio --enghelp 2>/dev/null | grep -qw nbd || skip "fio lacks the nbd engine"
nbd_init "$1"

conf=$tmp/r.conf
# write_conf MQ_SCHED SQ_SCHED WEIGHT [A_TUNABLE [TAIL]]: the file, as given
write_conf() {
	cat >"$conf.new" <<EOF
[group tenants]
weight = $3
[export a]
backend = memory 64M
sched = $1
${4:-}
[export b]
backend = memory 64M
front = sq
sched = $2
[client writer-a]
export = a
group = tenants
class = be
level = 2
${5:-}
EOF
	mv "$conf.new" "$conf"
}
write_conf none cfq 100
nbd_start --config "$conf"
threads() { ls "/proc/$nbd_pid/task" | wc -l; }
base=$(threads)

writer() { # NAME OUT
	fio --name=w --ioengine=nbd --uri="nbd+unix:///$1?socket=$sock" --rw=randwrite \
	    --bs=4k --iodepth=16 --size=64m --time_based --runtime=8 --verify=crc32c \
	    --verify_backlog=256 --verify_fatal=1 --randrepeat=0 \
	    --output-format=json --output="$2" >/dev/null 2>"$2.err"
}
writer writer-a "$tmp/a.json" &
pa=$!
writer b "$tmp/b.json" &
pb=$!

# reload WHAT: SIGHUP, wait for the reload's last line
n=0
reload() {
	n=$((n + 1))
	kill -HUP "$nbd_pid"
	for _ in $(seq 200); do
		[ "$(grep -c "rqnbd: reload\(ed\)\?[: ].*\(nothing changed\|connections placed again\)" "$nbd_log")" -ge $n ] && break
		sleep 0.05
	done
	[ "$(grep -c "rqnbd: reload\(ed\)\?[: ].*\(nothing changed\|connections placed again\)" "$nbd_log")" -ge $n ] ||
		fail "reload $n ($1) did not finish"
	kill -0 $pa 2>/dev/null && kill -0 $pb 2>/dev/null || echo "note: a writer ended before reload $n"
	sleep 0.8
}
# both writers connected: a thread each in the server
for _ in $(seq 200); do [ "$(threads)" -ge $((base + 2)) ] && break; sleep 0.05; done
[ "$(threads)" -ge $((base + 2)) ] || fail "the writers did not connect"
sleep 0.5
write_conf mq-deadline deadline 500 'iosched.read_expire = 100'
reload "mq-deadline, deadline"
write_conf bfq noop 1000 'iosched.low_latency = 0'
reload "bfq, noop"
# a bad file: line 3 refused, nothing changes
printf '[group tenants]\nweight = 100\n[export a]\nbackend = memory 64M\nsched = kyber\nbogus\n' >"$conf"
reload "bad file"
grep -q "rqnbd: reload: $conf:6: expected 'key = value' or '\[section\]'; nothing changed" "$nbd_log" ||
	fail "the bad file was not reported with its line"
write_conf kyber cfq 200 "" '[export c]
backend = memory 1M'
sed -i 's/^backend = memory 64M$/backend = memory 32M/' "$conf"
reload "kyber, cfq, a new export, resized ones"
grep -q "export 'c' added" "$nbd_log" || fail "the new export was not added"
grep -q "export 'a': backend, size.*cannot change live: kept" "$nbd_log" || fail "the resize was not reported"
write_conf none cfq 100
reload "none, cfq"
grep -q "^rqnbd: export 'c' removed (final flush OK)" "$nbd_log" || fail "export c was not removed"

wait $pa || fail "writer on a failed: $(tail -5 "$tmp/a.json.err")"
wait $pb || fail "writer on b failed: $(tail -5 "$tmp/b.json.err")"
for f in a b; do
	python3 -c 'import json, sys
t = open(sys.argv[1]).read()
j = json.loads(t[t.index("{"):])["jobs"][0]
assert j["error"] == 0, "error %d" % j["error"]
assert j["write"]["io_bytes"] > 0 and j["read"]["io_bytes"] > 0, "no verified data"
print("%s: wrote %d MiB, verified %d MiB" % (sys.argv[2], j["write"]["io_bytes"] >> 20, j["read"]["io_bytes"] >> 20))' \
		"$tmp/$f.json" "$f" || fail "fio on $f: $(cat "$tmp/$f.json.err")"
done
for s in "none -> mq-deadline" "mq-deadline -> bfq" "bfq -> kyber" "kyber -> none" \
	 "cfq -> deadline" "deadline -> noop" "noop -> cfq"; do
	grep -q "scheduler $s\$" "$nbd_log" || fail "no switch $s"
done
[ "$(grep -c "connections placed again" "$nbd_log")" = 4 ] || fail "not 4 good reloads"
# both writers were being served, and placed again, at least at the good
# reloads after the first (the first may come as fio is still connecting)
[ "$(grep -c " 2 connections placed again" "$nbd_log")" -ge 3 ] ||
	fail "a reload did not place both connections again: $(grep "placed again" "$nbd_log")"
nbd_stop
grep -q " 0 error replies, 0 dropped, .*final flush OK" "$nbd_log" || fail "errors or drops: $(tail -1 "$nbd_log")"
echo "5 reloads under verified writes: schedulers switched live, nothing lost"
