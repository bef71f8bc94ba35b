#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The installed programs follow one command-line convention
# (examples/common/progopt.h):
#   --help        exit 0, the usage on stdout ("usage: NAME ..."), stderr empty
#   -h            the same
#   --version     exit 0, exactly "NAME (librequest) VERSION" on stdout
#   --bogus-flag  exit 2, nothing on stdout, exactly one line on stderr naming it
# Each runs in an empty directory, which must stay empty (fileq --help once
# made a 16 MiB file called "--help").  Every program meson installs into
# bindir (meson-info/intro-installed.json) must be among those checked.
#
#   programs.sh BUILD_ROOT VERSION PROGRAM...
set -u

build=$1 version=$2
shift 2
tmp=$(mktemp -d /tmp/rq-programs.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/cwd"
failed=0

fail() { echo "FAIL: $*"; failed=1; }

# run NAME EXPECTED_RC ARGS...: run in the empty directory, keep out/err
run() {
	prog=$1 want=$2
	shift 2
	(cd "$tmp/cwd" && "$prog" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null)
	rc=$?
	[ "$rc" = "$want" ] || fail "$(basename "$prog") $*: exit $rc, want $want" \
		"(stderr: $(head -c 300 "$tmp/err"))"
	if [ -n "$(ls -A "$tmp/cwd")" ]; then
		fail "$(basename "$prog") $*: created $(ls -A "$tmp/cwd" | tr '\n' ' ')"
		rm -rf "$tmp/cwd" && mkdir "$tmp/cwd"
	fi
}

checked=""
for prog in "$@"; do
	case $prog in /*) ;; *) prog=$build/$prog ;; esac
	name=$(basename "$prog")
	checked="$checked $name "
	failed_before=$failed
	failed=0

	for h in --help -h; do
		run "$prog" 0 "$h"
		grep -q "^usage: $name" "$tmp/out" || fail "$name $h: no 'usage: $name' on stdout"
		[ -s "$tmp/err" ] && fail "$name $h: wrote to stderr: $(head -n1 "$tmp/err")"
	done

	run "$prog" 0 --version
	[ "$(cat "$tmp/out")" = "$name (librequest) $version" ] ||
		fail "$name --version: '$(cat "$tmp/out")', want '$name (librequest) $version'"

	for bad in --bogus-flag --bogus-flag=1 -Z; do
		run "$prog" 2 "$bad"
		[ -s "$tmp/out" ] && fail "$name $bad: wrote to stdout"
		lines=$(wc -l <"$tmp/err")
		[ "$lines" = 1 ] || fail "$name $bad: $lines lines on stderr, want 1"
		opt=${bad%%=*}
		grep -q -- "$opt" "$tmp/err" || fail "$name $bad: stderr does not name $opt"
	done
	# a value out of range or malformed: one line that names the flag
	case $name in
	rqbench)  bad_values="--depth -5|--depth 12x|--threads 0|--seconds abc" ;;
	hddbench) bad_values="--readers -1|--ncq 1k|--time 0|--sched mq:cfq" ;;
	rqnbd)    bad_values="--port 70000|--memory 12Q|--queues -2" ;;
	fileq)    bad_values="disk.img 0|disk.img 16 extra" ;;
	nullq)    bad_values="sometimes|inline extra" ;;
	*)        bad_values="" ;;
	esac
	IFS='|'
	for args in $bad_values; do
		unset IFS
		# shellcheck disable=SC2086 # split into words on purpose
		run "$prog" 2 $args
		lines=$(wc -l <"$tmp/err")
		[ "$lines" = 1 ] || fail "$name $args: $lines lines on stderr, want 1"
		IFS='|'
	done
	unset IFS
	if [ "$name" = hddbench ]; then
		run "$prog" 2 --sched mq:cfq
		grep -q "single-queue" "$tmp/err" || fail "hddbench --sched mq:cfq: $(cat "$tmp/err")"
	fi
	[ $failed = 0 ] && echo "ok: $name"
	failed=$((failed | failed_before))
done

# every program meson installs into a bin directory was checked
installed=$(grep -o '"[^"]*/bin/[^"]*"' "$build/meson-info/intro-installed.json" |
	    sed 's/.*\/bin\///; s/"$//' | sort -u)
[ -n "$installed" ] || fail "no installed program in $build/meson-info/intro-installed.json"
for name in $installed; do
	case "$checked" in
	*" $name "*) ;;
	*) fail "installed program $name is not checked (add it to installed_programs)" ;;
	esac
done

exit $failed
