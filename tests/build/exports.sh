#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The shared library exports only rq_-prefixed names, each in a LIBREQUEST_
# version node (librequest.map).  Skipped (77) without nm.
# Usage: exports.sh PATH/TO/librequest.so
set -eu

lib=$1
if ! command -v nm >/dev/null 2>&1; then
	echo "nm not found: skipped"
	exit 77
fi

# nm prints versions (name@@NODE) with --with-symbol-versions (binutils >=
# 2.29, the default since 2.35); without it the version check is skipped.
versioned=0
vflag=
if nm --help 2>&1 | grep -q -- --with-symbol-versions; then
	versioned=1
	vflag=--with-symbol-versions
fi

syms=$(nm -D --defined-only $vflag "$lib") || {
	echo "FAIL: nm -D --defined-only $lib failed" >&2
	exit 1
}

status=0
count=0
# Lines are "VALUE TYPE NAME[@[@]VERSION]"; type A marks the version nodes.
while read -r value type name rest; do
	[ -n "$value" ] || continue
	[ "$type" = A ] && continue
	base=${name%%@*}
	case $base in
	rq_*) ;;
	*)
		echo "FAIL: exported symbol without the rq_ prefix: $name" >&2
		status=1
		continue
		;;
	esac
	case $versioned:$name in
	0:* | *@LIBREQUEST_*) ;;
	*)
		echo "FAIL: exported symbol without a LIBREQUEST_ version: $name" >&2
		status=1
		;;
	esac
	count=$((count + 1))
done <<END
$syms
END

if [ "$count" = 0 ] && [ "$status" = 0 ]; then
	echo "FAIL: $lib exports no rq_ symbol at all" >&2
	status=1
fi
[ "$status" = 0 ] && echo "ok: $count rq_ symbols exported"
exit "$status"
