#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Build the libFuzzer harness of rqnbd's parser with clang
# (-fsanitize=fuzzer,address,undefined) and run it for RQ_FUZZ_SECONDS
# (default 20) from the corpus kept in the tree (corpus-nbd-parse; new
# inputs go to a temporary directory, the tree is not written).  A crash,
# a sanitizer report or a broken invariant fails; the reproducer is kept
# in the test log's directory.  Skips (77) when clang or its libFuzzer
# runtime is missing.
#
# usage: run_fuzz.sh SRCDIR     (the source tree's root)
set -u
src=${1:?usage: run_fuzz.sh SRCDIR}
secs=${RQ_FUZZ_SECONDS:-20}
command -v clang >/dev/null || { echo "SKIP: clang is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/rq-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$tmp/probe.c"
clang -fsanitize=fuzzer "$tmp/probe.c" -o "$tmp/probe" 2>/dev/null ||
	{ echo "SKIP: clang has no libFuzzer runtime (libclang-rt-dev)"; exit 77; }
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$src/examples/nbd" "$src/examples/nbd/nbd_parse.c" \
	"$src/tests/fuzz/fuzz_nbd_parse.c" -o "$tmp/fuzz_nbd_parse" ||
	{ echo "FAIL: the harness does not build"; exit 1; }
mkdir "$tmp/corpus"
cd "$tmp" || exit 1
./fuzz_nbd_parse -max_total_time="$secs" -timeout=5 -rss_limit_mb=1024 \
	-print_final_stats=1 "$tmp/corpus" "$src/tests/fuzz/corpus-nbd-parse" 2>&1 | tail -25
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then
	for f in crash-* leak-* timeout-* oom-*; do
		[ -e "$f" ] && { echo "reproducer $f:"; od -An -tx1 "$f" | head; }
	done
	echo "FAIL: the fuzzer found a problem (exit $rc)"
	exit 1
fi
echo "ok: $secs s of fuzzing, no problem"
