#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Latency distributions per scheduler: rqbench (null driver, 4 KiB, one
# submitting thread, depth 32, batch 32, every bio timed from submission to
# its end_io) once per scheduler, the runs back to back, each run's whole
# histogram kept as a CDF.  Prints a markdown table of p50 / p99 / p99.9 /
# max, writes the CDFs as JSON (bench/plot.py lat-cdf draws them) and, with
# --plot, draws them.
#
# usage: bench/lat-cdf.sh [--seconds S] [--pattern P] [--completion C]
#                         [--scheds "LIST"] [--build DIR] [--json FILE] [--plot FILE]
#   --seconds S      seconds per scheduler (default 2)
#   --pattern P      randread, randwrite, randrw, read or write (default randrw)
#   --completion C   inline, thread or timer (default thread: the driver ends
#                    requests on another thread, as real drivers do)
#   --scheds LIST    schedulers, sq:NAME for the single-queue front end
#                    (default "none mq-deadline kyber bfq sq:noop")
#   --build DIR      meson build directory holding bench/rqbench (default: build)
#   --json FILE      the results (default: bench-results/lat-cdf.json in the
#                    build directory): {"bench", "date", "host", "args",
#                    "rows": [{"scheduler", "front", "pattern", "completion",
#                    "iops", "p50_ns", "p99_ns", "p999_ns", "max_ns",
#                    "cdf": [[ns, fraction], ...]}]}
#   --plot FILE      also draw the CDFs into FILE (.png or .svg)
# A progress line per run goes to stderr.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
args=("$@")
seconds=2
pattern=randrw
completion=thread
scheds="none mq-deadline kyber bfq sq:noop"
build="$top/build"
json=""
plot=""
usage_error() { echo "lat-cdf.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case "$1" in
	--seconds | --pattern | --completion | --scheds | --build | --json | --plot)
		[ $# -ge 2 ] || usage_error "$1 needs a value"
		case "$1" in
		--seconds) seconds=$2 ;;
		--pattern) pattern=$2 ;;
		--completion) completion=$2 ;;
		--scheds) scheds=$2 ;;
		--build) build=$2 ;;
		--json) json=$2 ;;
		--plot) plot=$2 ;;
		esac
		shift ;;
	-h | --help) sed -n '3,26p' "$0"; exit 0 ;;
	*) usage_error "unknown argument $1" ;;
	esac
	shift
done
rqbench="$build/bench/rqbench"
[ -x "$rqbench" ] || { echo "lat-cdf.sh: no $rqbench (build first)" >&2; exit 1; }
json=${json:-$(cd "$build" && pwd)/bench-results/lat-cdf.json}
mkdir -p "$(dirname "$json")"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 of=$(wc -w <<<"$scheds")
for s in $scheds; do
	n=$((n + 1))
	front=mq sched=$s
	case "$s" in sq:*) front=sq sched=${s#sq:} ;; esac
	echo "lat-cdf: [$n/$of] $s, $pattern, completion $completion, $seconds s" >&2
	"$rqbench" --front "$front" --sched "$sched" --threads 1 --depth 32 --batch 32 \
		--pattern "$pattern" --completion "$completion" --seconds "$seconds" \
		--json --cdf >"$tmp/$n.json" 2>"$tmp/$n.err" ||
		{ echo "lat-cdf.sh: rqbench failed for $s:" >&2; cat "$tmp/$n.err" >&2; exit 1; }
	echo "$s" >"$tmp/$n.name"
done

python3 - "$tmp" "$n" "$json" "${args[@]}" <<'EOF' || exit 1
import datetime, json, socket, sys

tmp, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
print("| scheduler | M IOPS | p50 us | p99 us | p99.9 us | max us |")
print("|---|---:|---:|---:|---:|---:|")
for i in range(1, n + 1):
    name = open("%s/%d.name" % (tmp, i)).read().strip()
    r = json.load(open("%s/%d.json" % (tmp, i)))
    lat = r["lat_ns"]
    rows.append({"scheduler": name, "front": r["front"], "pattern": r["pattern"],
                 "completion": r["completion"], "iops": r["iops"],
                 "p50_ns": lat["p50"], "p99_ns": lat["p99"], "p999_ns": lat["p999"],
                 "max_ns": lat["max"], "cdf": r["cdf"]})
    print("| %s | %.2f | %.1f | %.1f | %.1f | %.1f |" % (
        name, r["iops"] / 1e6, lat["p50"] / 1e3, lat["p99"] / 1e3,
        lat["p999"] / 1e3, lat["max"] / 1e3))
doc = {"bench": "lat-cdf",
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "host": socket.gethostname(), "args": sys.argv[4:], "rows": rows}
with open(out, "w") as f:
    json.dump(doc, f)
    f.write("\n")
EOF
echo "lat-cdf: results in $json" >&2
if [ -n "$plot" ]; then
	"$here/plot.py" lat-cdf "$json" "$plot" \
		--title "latency CDF: $pattern, completion $completion, depth 32, 1 thread" || exit 1
	echo "lat-cdf: plot in $plot" >&2
fi
