#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The contrast the multi-queue layer was built for: the single-queue front
# end (sq/noop: one queue lock shared by every submitter and completer)
# against the multi-queue one (mq/none) on the null driver, at 1, 2, 4 and
# 8 submitting threads, with the device depth 32 and 1.
#
# usage: bench/sq-vs-mq.sh [--build DIR] [--seconds S] [--json FILE] [--csv FILE]
#   a progress line per run on stderr; the tables' rows also go to
#   bench-results/sq-vs-mq.json and .csv in the build directory (or FILE),
#   raw IOPS
set -euo pipefail
# shellcheck source=bench/results.sh
. "$(dirname "${BASH_SOURCE[0]}")/results.sh"
results_init sq-vs-mq "$@"
trap 'rm -f "$results_rows"' EXIT
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build
secs=2
while [[ $# -gt 0 ]]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--seconds) secs=$2; shift 2 ;;
	--json|--csv) results_arg "$1" "${2:-}"; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--seconds S] [--json FILE] [--csv FILE]" >&2; exit 2 ;;
	esac
done
rqbench=$build/bench/rqbench
[[ -x $rqbench ]] || { echo "no $rqbench: build first" >&2; exit 1; }
results_in "$build"

# run FRONT SCHED THREADS HWDEPTH COMPLETION -> IOPS
run() {
	"$rqbench" --front "$1" --sched "$2" --threads "$3" --hw-depth "$4" \
		--completion "$5" --depth 32 --batch 1 --bs 4096 --pattern randread \
		--seconds "$secs" --no-lat --json |
		sed -n 's/.*"iops":\([0-9.]*\).*/\1/p'
}

# mega IOPS: "1.23 M"
mega() { awk -v v="$1" 'BEGIN { printf "%.2f M", v / 1e6 }'; }

progress_total 32

for completion in inline thread; do
	for hwdepth in 32 1; do
		echo
		echo "completion $completion, device depth $hwdepth, 4 KiB randread, 32 in flight per thread, no plug:"
		echo
		echo "| threads | sq/noop | mq/none | mq / sq |"
		echo "|---:|---:|---:|---:|"
		for t in 1 2 4 8; do
			step="completion $completion, device depth $hwdepth, $t thread(s), ${secs}s"
			progress "sq/noop, $step"
			sq_iops=$(run sq noop "$t" "$hwdepth" "$completion")
			progress "mq/none, $step"
			mq_iops=$(run mq none "$t" "$hwdepth" "$completion")
			sq=$(mega "$sq_iops")
			mq=$(mega "$mq_iops")
			ratio=$(awk -v a="${sq% M}" -v b="${mq% M}" 'BEGIN { printf "%.1fx", b / a }')
			echo "| $t | $sq | $mq | $ratio |"
			results_row completion="$completion" hw_depth="$hwdepth" threads="$t" \
				sq_noop_iops="$sq_iops" mq_none_iops="$mq_iops" mq_over_sq="${ratio%x}"
		done
	done
done
results_write
