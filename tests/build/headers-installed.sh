#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Every header in the public include directory must be installed, and every
# installed header (but the generated version.h) must exist there.
# Usage: headers-installed.sh INCLUDE_DIR INSTALLED_NAME...
set -eu

dir=$1
shift
status=0

for path in "$dir"/*.h; do
	[ -e "$path" ] || continue
	name=${path##*/}
	found=0
	for installed in "$@"; do
		[ "$installed" = "$name" ] && found=1
	done
	if [ "$found" = 0 ]; then
		echo "FAIL: $name is in include/librequest but not in public_headers" >&2
		status=1
	fi
done

for installed in "$@"; do
	[ "$installed" = version.h ] && continue
	if [ ! -e "$dir/$installed" ]; then
		echo "FAIL: public_headers lists $installed, which does not exist" >&2
		status=1
	fi
done

[ "$status" = 0 ] && echo "ok: $# headers"
exit "$status"
