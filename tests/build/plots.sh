#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The bench tools' machine-readable output and plots:
#   - rqbench --json --cdf: valid JSON whose "cdf" rises strictly in latency,
#     never falls in fraction and ends at 1; --cdf without --json exits 2
#   - bench/lat-cdf.sh (two schedulers, short runs) writes a JSON row per
#     scheduler with a CDF and draws it with --plot
#   - bench/plot.py draws each KIND (sched-threads, lat-cdf, nbd-peers) from
#     the results here and in tests/build/plots/ as a PNG and an SVG, keeps
#     its .gp and .dat; an unknown KIND or output type exits 2
# Skipped (77) without gnuplot or python3.
#
#   plots.sh SOURCE_ROOT BUILD_ROOT
set -u
src=$1 build=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
command -v gnuplot >/dev/null || { echo "SKIP: no gnuplot (Debian: gnuplot-nox)"; exit 77; }
tmp=$(mktemp -d /tmp/rq-plots.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

"$build/bench/rqbench" --ops 20000 --json --cdf >"$tmp/rq.json" || fail "rqbench --json --cdf"
python3 - "$tmp/rq.json" <<'PY' || fail "rqbench's CDF is not a CDF"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["cdf"]
assert c, "empty cdf"
assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(c, c[1:])), "not monotone"
assert abs(c[-1][1] - 1) < 1e-9, "does not end at 1: %r" % c[-1]
assert c[-1][0] <= d["lat_ns"]["max"], "beyond the maximum"
PY
"$build/bench/rqbench" --ops 1000 --cdf >/dev/null 2>"$tmp/err"
[ $? = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] || fail "rqbench --cdf without --json: not exit 2 with one line"

"$src/bench/lat-cdf.sh" --seconds 0.1 --scheds "none mq-deadline" --build "$build" \
	--json "$tmp/lat.json" --plot "$tmp/lat.png" >"$tmp/lat.md" 2>"$tmp/lat.err" ||
	{ cat "$tmp/lat.err"; fail "lat-cdf.sh"; }
python3 - "$tmp/lat.json" <<'PY' || fail "lat-cdf.sh's JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert [r["scheduler"] for r in d["rows"]] == ["none", "mq-deadline"], d["rows"]
assert all(r["cdf"] and r["p50_ns"] <= r["p99_ns"] for r in d["rows"])
PY
grep -q '^| mq-deadline |' "$tmp/lat.md" || fail "lat-cdf.sh printed no table row for mq-deadline"

# is_png FILE / is_svg FILE
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
is_svg() { grep -q '<svg' "$1"; }
is_png "$tmp/lat.png" || fail "lat-cdf.sh --plot drew no PNG"
for kind in sched-threads:sched-table.json lat-cdf:lat.json nbd-peers:nbd-peers.json; do
	k=${kind%%:*} f=${kind#*:}
	in=$src/tests/build/plots/$f
	[ -f "$in" ] || in=$tmp/$f
	for ext in png svg; do
		out=$tmp/$k.$ext
		"$src/bench/plot.py" "$k" "$in" "$out" || { fail "plot.py $k -> $ext"; continue; }
		is_$ext "$out" || fail "plot.py $k: $out is not $ext"
		[ -s "$out.gp" ] && [ -s "$out.dat" ] || fail "plot.py $k: no .gp/.dat beside $out"
	done
done
"$src/bench/plot.py" pie "$tmp/lat.json" "$tmp/x.png" 2>/dev/null
[ $? = 2 ] || fail "plot.py: an unknown KIND is not exit 2"
"$src/bench/plot.py" lat-cdf "$tmp/lat.json" "$tmp/x.gif" 2>/dev/null
[ $? = 2 ] || fail "plot.py: a .gif output is not exit 2"
"$src/bench/plot.py" nbd-peers "$tmp/lat.json" "$tmp/x.png" 2>/dev/null
[ $? = 1 ] || fail "plot.py: results of another kind are not exit 1"
exit $failed
