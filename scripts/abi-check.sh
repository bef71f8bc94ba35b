#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The library's ABI against the checked-in baseline (abi/README.md).
#
#   scripts/abi-check.sh [BUILD_DIR]          compare (the build test abi-baseline)
#   scripts/abi-check.sh --update [BUILD_DIR] write the baseline from the build
#   scripts/abi-check.sh --update-headers [BUILD_DIR]
#                                             copy the public headers (and the
#                                             generated version.h) as this
#                                             release's, for the abi-compat test
#   scripts/abi-check.sh --update-map         list new RQ_EXPORT functions in
#                                             lib/librequest.map (then rebuild)
#
# BUILD_DIR defaults to build/.  The baseline is abi/librequest-MAJOR.MINOR.abi
# of the version being built when updating; the check compares against the
# newest abi/librequest-*.abi.  Both sides are written by abidw with the
# public headers (include/librequest and the generated version.h), private
# types dropped and no paths or locations, so only the public interface is
# compared.  The check fails on any change abidiff reports but added
# functions; exit 77 when abidw/abidiff (Debian: abigail-tools) are missing
# or the library has no debug information (abidw needs DWARF).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=check
case ${1:-} in
--update) mode=update; shift ;;
--update-headers) mode=headers; shift ;;
--update-map) mode=map; shift ;;
--help | -h) sed -n '3,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
-*) echo "abi-check: unknown option $1" >&2; exit 2 ;;
esac
build=${1:-$src/build}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "abi-check: no build directory ${1:-build}" >&2; exit 2; }

if [[ $mode == map ]]; then
	exec python3 "$src/tests/build/symbols.py" --update-map --map "$src/lib/librequest.map" \
		--scan "$src/lib" "$src/sched"
fi

version_h=$build/include/librequest/version.h
if [[ ! -f $version_h ]]; then
	echo "abi-check: $version_h missing: build first (ninja -C $build)" >&2
	exit 2
fi
major=$(sed -n 's/^#define RQ_VERSION_MAJOR \([0-9]*\).*/\1/p' "$version_h")
minor=$(sed -n 's/^#define RQ_VERSION_MINOR \([0-9]*\).*/\1/p' "$version_h")
release=$major.$minor

if [[ $mode == headers ]]; then
	dest=$src/abi/include-$release/librequest
	rm -rf "$dest"
	mkdir -p "$dest"
	cp "$src"/include/librequest/*.h "$version_h" "$dest"/
	echo "abi-check: public headers of $release copied to ${dest#"$src"/}"
	exit 0
fi

lib=$build/lib/librequest.so
if [[ ! -e $lib ]]; then
	echo "abi-check: $lib missing: build first (ninja -C $build)" >&2
	exit 2
fi
for tool in abidw abidiff; do
	if ! command -v $tool >/dev/null 2>&1; then
		echo "abi-check: $tool not found (Debian package abigail-tools): skipped"
		exit 77
	fi
done
if ! readelf -S "$lib" 2>/dev/null | grep -q '\.debug_info'; then
	echo "abi-check: $lib has no debug information (abidw needs it): skipped"
	exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hdrs=$tmp/headers
mkdir -p "$hdrs"
cp "$src"/include/librequest/*.h "$version_h" "$hdrs"/

# abidw_of LIB OUT: the ABI description of LIB's public interface.
abidw_of() {
	abidw --headers-dir "$hdrs" --drop-private-types --drop-undefined-syms \
		--no-corpus-path --no-comp-dir-path --no-show-locs --no-architecture \
		--type-id-style hash --out-file "$2" "$1"
	# Translation units are named by their path from the build directory:
	# keep it relative to the source tree, wherever the build is.
	sed -i -E "s|(<abi-instr [^>]* path=')[^']*/((lib\|sched)/[^']*')|\1\2|" "$2"
	sed -i '1a <!-- SPDX-License-Identifier: LGPL-2.1-or-later -->\
<!-- Generated from a build by scripts/abi-check.sh (option: update); do not edit. -->' "$2"
}

if [[ $mode == update ]]; then
	out=$src/abi/librequest-$release.abi
	mkdir -p "$src/abi"
	abidw_of "$lib" "$out"
	echo "abi-check: baseline written to abi/librequest-$release.abi" \
		"($(grep -c '<elf-symbol ' "$out") symbols)"
	exit 0
fi

baseline=$(ls "$src"/abi/librequest-*.abi 2>/dev/null | sort -V | tail -n 1)
if [[ -z $baseline ]]; then
	echo "abi-check: no baseline abi/librequest-*.abi: make one with $0 --update" >&2
	exit 1
fi
abidw_of "$lib" "$tmp/current.abi"
# Opaque types: the public headers only declare them (struct rq_queue;),
# callers hold pointers, their layout is the library's own.  abidw still
# describes them from the library's debug information, so their changes
# are suppressed here by name; the list is made from the headers each run.
opaque=$(python3 - "$hdrs" <<'PY'
import glob, re, sys
text = ''.join(open(f).read() for f in glob.glob(sys.argv[1] + '/*.h'))
text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
declared = set(re.findall(r'^struct (\w+);', text, re.M))
defined = set(re.findall(r'^struct (\w+) \{', text, re.M))
print('|'.join(sorted(declared - defined)))
PY
)
printf '[suppress_type]\n  name_regexp = ^(%s)$\n' "$opaque" > "$tmp/opaque.suppr"
rc=0
abidiff --no-show-locs --no-added-syms --drop-private-types --suppressions "$tmp/opaque.suppr" \
	"$baseline" "$tmp/current.abi" >"$tmp/diff" 2>&1 || rc=$?
cat "$tmp/diff"
if ((rc & 3)); then
	echo "abi-check: abidiff failed (exit $rc)" >&2
	exit 1
fi
if ((rc & 12)); then
	what="changed"
	((rc & 8)) && what="changed incompatibly"
	echo "FAIL: the ABI $what against ${baseline#"$src"/}" >&2
	echo "  (if intended, before the release ships: $0 --update)" >&2
	exit 1
fi
echo "ok: ABI as in ${baseline#"$src"/}"
