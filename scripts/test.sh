#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Set up and build librequest, then run every test suite:
#   build/       all suites (unit, sched, stress, build, integration)
#   build-asan/  unit, sched and stress under AddressSanitizer + UBSan
#   build-tsan/  stress, unit and sched under ThreadSanitizer (when a stress test
#                exists), minus suite no-tsan (the tsan setup excludes it
#                when no suite is named; named suites need --no-suite)
# Every build is configured with -Dwerror=true.
# SKIP_SANITIZERS=1 runs only the first.  BUILD_DIR renames build/ (the
# sanitizer builds go to $BUILD_DIR-asan and $BUILD_DIR-tsan).
#
# Ends with one line "N passed, N failed[, N skipped]" counting test cases
# over all runs: cmocka programs by their own case counts, other programs
# as one case each.  Exits non-zero if anything failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}
asan_dir=$build_dir-asan
tsan_dir=$build_dir-tsan
start=$SECONDS
runs=()   # "label|build dir|meson test exit status"

say() { printf '\n=== %s\n' "$*"; }

# meson_setup DIR OPTIONS...: configure DIR with -Dwerror=true and OPTIONS,
# or reconfigure it so (wiping it if that fails).
meson_setup() {
	local dir=$1
	shift
	set -- -Dwerror=true "$@"
	if [[ -f $dir/build.ninja ]]; then
		meson setup --reconfigure "$dir" "$@" || meson setup --wipe "$dir" "$@"
	else
		meson setup "$dir" "$@"
	fi
}

# run_tests LABEL DIR MESON-TEST-ARGS...: run meson test, remember the run.
run_tests() {
	local label=$1 dir=$2 rc
	shift 2
	say "$label: meson test -C $dir $*"
	rm -f "$dir"/meson-logs/testlog*
	meson test -C "$dir" --print-errorlogs "$@" </dev/null
	rc=$?
	runs+=("$label|$dir|$rc")
}

# has_suite DIR SUITE...: true if DIR defines a test in one of the suites.
has_suite() {
	local dir=$1
	shift
	meson introspect "$dir" --tests | python3 -c '
import json, sys
wanted = set(sys.argv[1:])
tests = json.load(sys.stdin)
found = any(s.split(":")[-1] in wanted for t in tests for s in t["suite"])
sys.exit(0 if found else 1)' "$@"
}

say "setup and build ($build_dir)"
if ! scripts/setup.sh; then
	echo "test: setup or build failed" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

run_tests "all suites" "$build_dir"

if [[ ${SKIP_SANITIZERS:-0} == 1 ]]; then
	say "sanitizer builds skipped (SKIP_SANITIZERS=1)"
else
	if has_suite "$build_dir" unit sched; then
		say "ASan+UBSan build ($asan_dir)"
		if meson_setup "$asan_dir" -Dbuildtype=debugoptimized \
			-Db_sanitize=address,undefined -Db_lundef=false; then
			run_tests "unit+sched+stress (asan)" "$asan_dir" --setup asan \
				--suite unit --suite sched --suite stress --num-processes 2
		else
			runs+=("unit+sched+stress (asan): setup failed|$asan_dir|1")
		fi
	else
		say "no unit or sched tests: ASan build skipped"
	fi
	if has_suite "$build_dir" stress; then
		say "TSan build ($tsan_dir)"
		if meson_setup "$tsan_dir" -Dbuildtype=debugoptimized -Db_sanitize=thread; then
			run_tests "stress+unit+sched (tsan)" "$tsan_dir" --setup tsan \
				--suite stress --suite unit --suite sched --no-suite no-tsan \
				--num-processes 2
		else
			runs+=("stress+unit+sched (tsan): setup failed|$tsan_dir|1")
		fi
	else
		say "no stress test: TSan build skipped"
	fi
fi

say "results ($((SECONDS - start)) s)"
python3 - "${runs[@]}" <<'PY'
import glob, json, os, re, sys

PASSED = re.compile(r'^\[  PASSED  \] (\d+) test\(s\)\.', re.M)
FAILED = re.compile(r'^\[  FAILED  \] (\d+) test\(s\), listed below:', re.M)
SKIPPED = re.compile(r'^\[  SKIPPED \] (\d+) test\(s\), listed below:', re.M)

total = [0, 0, 0]
for run in sys.argv[1:]:
    label, builddir, rc = run.rsplit('|', 2)
    rc = int(rc)
    counts = [0, 0, 0]
    notes = []
    results = []
    for log in glob.glob(os.path.join(builddir, 'meson-logs', 'testlog*.json')):
        with open(log, errors='replace') as f:
            results += [json.loads(line) for line in f if line.strip()]
    for r in results:
        out = (r.get('stdout') or '') + '\n' + (r.get('stderr') or '')
        res = r.get('result', 'ERROR')
        p = sum(map(int, PASSED.findall(out)))
        fl = sum(map(int, FAILED.findall(out)))
        s = sum(map(int, SKIPPED.findall(out)))
        cmocka = bool(PASSED.search(out) or FAILED.search(out) or SKIPPED.search(out))
        if res == 'SKIP' and not cmocka:
            s = 1
        elif not cmocka:
            if res in ('OK', 'EXPECTEDFAIL'):
                p = 1
            else:
                fl = 1
        elif res not in ('OK', 'SKIP', 'EXPECTEDFAIL') and fl == 0:
            # every case passed, but the program did not (sanitizer report
            # at exit, leak, crash after the summary, timeout)
            fl = 1
        if res not in ('OK', 'SKIP', 'EXPECTEDFAIL'):
            notes.append('%s: %s' % (r.get('name', '?'), res))
        counts[0] += p
        counts[1] += fl
        counts[2] += s
    if not results:
        # nothing ran: the build or the harness failed
        if rc != 0:
            counts[1] += 1
            notes.append('no test ran (meson test exit status %d)' % rc)
    elif rc != 0 and counts[1] == 0:
        counts[1] += 1
        notes.append('meson test exit status %d' % rc)
    print('  %-22s %d passed, %d failed, %d skipped (%d programs)'
          % (label + ':', counts[0], counts[1], counts[2], len(results)))
    for n in notes:
        print('      failed: ' + n)
    for i in range(3):
        total[i] += counts[i]

line = '%d passed, %d failed' % (total[0], total[1])
if total[2]:
    line += ', %d skipped' % total[2]
print(line)
sys.exit(1 if total[1] else 0)
PY
