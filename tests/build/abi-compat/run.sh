#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# A driver built against a previous release's headers still runs: compile
# memdrv.c against each abi/include-X.Y (the public headers as release X.Y
# shipped them; scripts/abi-check.sh --update-headers makes one) and run it
# against the library just built.  Every one must compile and exit 0.
# Usage: run.sh ABI_DIR OUT_DIR LIBRARY -- CC [CC-ARGS...]
set -eu

abi=$1
out=$2
lib=$3
shift 3
if [ "${1:-}" != -- ]; then
	echo "usage: $0 ABI_DIR OUT_DIR LIBRARY -- CC [CC-ARGS...]" >&2
	exit 99
fi
shift
src=$(dirname "$0")/memdrv.c
libdir=$(cd "$(dirname "$lib")" && pwd)

status=0
count=0
for inc in "$abi"/include-*/; do
	[ -f "$inc/librequest/librequest.h" ] || continue
	rel=$(basename "$inc")
	exe=$out/memdrv-$rel
	rm -f "$exe"
	count=$((count + 1))
	echo "== $rel: $* -I$inc $src $lib -o $exe"
	if ! "$@" -std=gnu11 -Wall -Wextra -Werror -I"$inc" "$src" "$lib" \
		-Wl,-rpath,"$libdir" -lpthread -o "$exe"; then
		echo "FAIL: memdrv.c does not compile against $rel" >&2
		status=1
		continue
	fi
	if ! "$exe"; then
		echo "FAIL: memdrv built against $rel failed with this library" >&2
		status=1
	fi
done
if [ "$count" = 0 ]; then
	echo "FAIL: no $abi/include-*/librequest/librequest.h" >&2
	exit 1
fi
[ "$status" = 0 ] && echo "ok: $count release(s)"
exit "$status"
