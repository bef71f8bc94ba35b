#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# bench/speed-report.sh in its smoke mode (one round of 20000 bios per run,
# tiny peer runs), checking the report's shape, never its numbers:
#   - exit 0; a markdown table with every configuration of the issue in
#     order (the empty life, mq/none inline and with the completion thread,
#     the mq schedulers, sq noop/deadline/cfq, the two peers), 1 and 2
#     threads, and a "Targets met: N of 10." line;
#   - with --baseline (this same build, so the columns exist) two more
#     columns, and an after / before ratio on every rqbench row;
#   - the JSON: bench "speed-report", one row per table row with the same
#     ids, a positive IOPS on every rqbench row, the ratio the table shows,
#     and result PASS or FAIL exactly where a target is given; the CSV has
#     a header and as many lines as rows;
#   - rqbench --empty --json names its run "empty" and counts every life;
#   - --help exits 0 with the usage; bad usage exits 2 with one line.
# Skipped (77) without python3.
#
#   speed-report.sh SOURCE_ROOT BUILD_ROOT
set -u
src=$1 build=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/rq-speed-report.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

"$build/bench/rqbench" --empty --ops 5000 --threads 2 --json >"$tmp/empty.json" ||
	fail "rqbench --empty"
python3 - "$tmp/empty.json" <<'PY' || fail "rqbench --empty's JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["front"] == "empty" and d["threads"] == 2, d
assert d["ops"] == 5000 and d["requests"] == 5000 and d["errors"] == 0, d
assert d["iops"] > 0, d
PY

"$src/bench/speed-report.sh" --smoke --build "$build" --baseline "$build" \
	--json "$tmp/r.json" --csv "$tmp/r.csv" >"$tmp/r.md" 2>"$tmp/r.err"
rc=$?
[ $rc = 0 ] || { cat "$tmp/r.err"; fail "speed-report.sh --smoke: exit $rc"; }
grep -q '^speed-report: \[1/' "$tmp/r.err" || fail "no progress lines on stderr"
grep -q '^Targets met: [0-9]* of 10\.$' "$tmp/r.md" || fail "no 'Targets met: N of 10.' line"
python3 - "$tmp/r.md" "$tmp/r.json" "$tmp/r.csv" <<'PY' || fail "the report's shape"
import csv, json, sys
md, js, cs = sys.argv[1:4]
ids = ["empty1", "empty2", "none1", "none2", "none2:scale", "ct1", "ct2", "mqdl1", "mqdl2",
       "kyber1", "kyber2", "floormin1", "floorhooks1", "bfq1", "bfq2", "sqnoop1", "sqnoop2", "sqdl1", "sqdl2",
       "sqcfq1", "sqcfq2", "qemu", "fio"]
rows = [l for l in open(md) if l.startswith("| ")]
head, body = rows[0], rows[1:]
cols = [c.strip() for c in head.strip().strip("|").split("|")]
assert cols[:7] == ["configuration", "M IOPS", "rounds", "ratio", "of what", "target",
                    "result"], cols
assert cols[7:] == ["before M IOPS", "after / before"], cols
assert len(body) == len(ids), (len(body), len(ids))
d = json.load(open(js))
assert d["bench"] == "speed-report", d["bench"]
assert [r["id"] for r in d["rows"]] == ids, [r["id"] for r in d["rows"]]
for line, r in zip(body, d["rows"]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    assert len(cells) == len(cols), line
    assert cells[0] == r["config"], (cells[0], r["config"])
    if r["id"] not in ("qemu", "fio"):
        assert isinstance(r["iops"], (int, float)) and r["iops"] > 0, r
        assert float(cells[1]) > 0, line
        assert isinstance(r["after_before"], (int, float)), r
        assert cells[8] != "-", line
    if r["ratio"] != "":
        assert cells[3] == "%.2f" % r["ratio"], (cells[3], r["ratio"])
    if r["target"] != "":
        assert r["result"] in ("PASS", "FAIL"), r
        assert cells[6] == r["result"] and cells[5] == ">= %s" % r["target"], line
    else:
        assert r["result"] == "-" and cells[6] == "-", r
assert sum(1 for r in d["rows"] if r["target"] != "") == 10
with open(cs) as f:
    c = list(csv.reader(f))
assert c[0][0] == "id" and len(c) == len(ids) + 1, c[0]
PY

"$src/bench/speed-report.sh" --help >"$tmp/h" 2>&1 || fail "--help: not exit 0"
grep -q '^usage: bench/speed-report.sh' "$tmp/h" || fail "--help: no usage line"
for bad in "--bogus" "--rounds 0" "--seconds x" "--build /nonexistent"; do
	# shellcheck disable=SC2086
	"$src/bench/speed-report.sh" $bad >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "$bad: exit $rc, want 2"
	[ "$(wc -l <"$tmp/err")" = 1 ] || fail "$bad: not one line on stderr"
	[ -s "$tmp/out" ] && fail "$bad: wrote to stdout"
done
exit $failed
