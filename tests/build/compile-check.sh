#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Compile (and optionally run) a build check.
# Usage: compile-check.sh OUT [--run] -- COMPILER ARGS...
# Runs "COMPILER ARGS... -o OUT"; with --run, then runs OUT, which must exit 0.
set -eu

out=$1
shift
run=0
if [ "${1:-}" = --run ]; then
	run=1
	shift
fi
if [ "${1:-}" != -- ]; then
	echo "usage: $0 OUT [--run] -- COMPILER ARGS..." >&2
	exit 99
fi
shift

rm -f "$out"
echo "$* -o $out"
if ! "$@" -o "$out"; then
	echo "FAIL: does not compile" >&2
	exit 1
fi
if [ "$run" = 1 ]; then
	if ! "$out"; then
		echo "FAIL: $out did not exit 0" >&2
		exit 1
	fi
fi
echo "ok"
