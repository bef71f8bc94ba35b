# SPDX-License-Identifier: LGPL-2.1-or-later
# shellcheck shell=bash
#
# Sourced by the bench scripts: a progress line per step on stderr, and the
# results as JSON and CSV beside the table the script prints on stdout.
#
#   results_init NAME        at the start: NAME names the lines and files
#   results_arg FLAG VALUE   in the argument loop: --json FILE, --csv FILE
#   results_in BUILD_DIR     once the build directory is known: the default
#                            files go under it
#   progress_total N         the number of steps to come
#   progress WHAT...         "NAME: [i/N] WHAT" on stderr
#   results_row KEY=VALUE... one result row (the same keys, in the same
#                            order, for rows of the same table)
#   results_write            at the end: write both files, say where
#
# Files: bench-results/NAME.json and bench-results/NAME.csv in the meson
# build directory the script runs the programs of (the directory it was
# started from when there is none), unless --json FILE / --csv FILE say
# otherwise.  The JSON is {"bench": NAME, "date": ISO-8601 UTC,
# "host": ..., "args": [...], "rows": [{KEY: VALUE, ...}, ...]}, numbers as
# numbers, a KEY ending in "rounds" (space-separated values) as a list; the
# CSV has one header line (every key, in first-seen order) and a line per
# row, values as given.

results_init() {
	results_name=$1
	results_dir=$PWD/bench-results
	results_json=
	results_csv=
	results_rows=$(mktemp "/tmp/$1-rows.XXXXXX")
	results_args=("${@:2}")
	progress_n=0
	progress_of=0
}

# results_arg FLAG VALUE: take --json FILE or --csv FILE; return 1 otherwise
results_arg() {
	case "$1" in
	--json) results_json=$2 ;;
	--csv) results_csv=$2 ;;
	*) return 1 ;;
	esac
	case "${2:-}" in
	"" | --*) echo "$results_name: $1 needs a file name" >&2; exit 2 ;;
	esac
}

# results_in DIR: the default files go in DIR/bench-results
results_in() {
	[ -n "$1" ] && [ -d "$1" ] && results_dir=$(cd "$1" && pwd)/bench-results
}

progress_total() { progress_of=$1; }

progress() {
	progress_n=$((progress_n + 1))
	echo "$results_name: [$progress_n/$progress_of] $*" >&2
}

# results_row KEY=VALUE...: fields separated by the unit separator
results_row() {
	local IFS=$'\x1f'
	echo "$*" >>"$results_rows"
}

results_write() {
	results_json=${results_json:-$results_dir/$results_name.json}
	results_csv=${results_csv:-$results_dir/$results_name.csv}
	mkdir -p "$(dirname "$results_json")" "$(dirname "$results_csv")" || return 1
	python3 - "$results_rows" "$results_json" "$results_csv" "$results_name" \
		"${results_args[@]}" <<'EOF' || return 1
import csv, datetime, json, re, socket, sys

rows_file, json_file, csv_file, name = sys.argv[1:5]
number = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")

def value(v):
    if number.match(v):
        return float(v) if re.search(r"[.eE]", v) else int(v)
    return v

rows, keys = [], []
with open(rows_file) as f:
    for line in f:
        row = {}
        for field in line.rstrip("\n").split("\x1f"):
            k, _, v = field.partition("=")
            # KEY ending in "rounds": the values of every round, a list
            row[k] = [value(x) for x in v.split()] if k.endswith("rounds") else value(v)
            if k not in keys:
                keys.append(k)
        rows.append(row)
doc = {
    "bench": name,
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "host": socket.gethostname(),
    "args": sys.argv[5:],
    "rows": rows,
}
with open(json_file, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
with open(csv_file, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=keys, restval="")
    w.writeheader()
    for row in rows:
        w.writerow({k: " ".join(map(str, v)) if isinstance(v, list) else v
                    for k, v in row.items()})
EOF
	rm -f "$results_rows"
	echo "$results_name: results in $results_json and $results_csv" >&2
}
