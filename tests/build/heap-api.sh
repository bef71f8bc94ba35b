#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The library's heap is jemalloc's API (lib/alloc.c, issue 17 item 2): in a
# build with jemalloc and no sanitizer, librequest.so imports mallocx and
# sdallocx (and dallocx, rallocx, mallctl for its NUMA arenas) and none of
# libc's allocation functions, so no block of the library's reaches the
# process's malloc whatever the program links or preloads.  Skipped (77)
# where the heap is libc by design (no jemalloc, or a sanitizer build) and
# without nm.
# Usage: heap-api.sh LIBRARY.so BACKEND   (BACKEND: jemalloc or libc)
set -eu

lib=$1
backend=$2
if [ "$backend" != jemalloc ]; then
	echo "the library's heap is $backend (no jemalloc, or a sanitizer build): skipped"
	exit 77
fi
command -v nm >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }

undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u)
status=0
for sym in mallocx sdallocx dallocx rallocx mallctl; do
	if ! echo "$undef" | grep -qx "$sym"; then
		echo "FAIL: $lib does not call jemalloc's $sym"
		status=1
	fi
done
for sym in malloc calloc realloc free aligned_alloc posix_memalign memalign valloc \
	   strdup strndup numa_alloc_onnode; do
	if echo "$undef" | grep -qx "$sym"; then
		echo "FAIL: $lib calls $sym: some of its memory bypasses lib/alloc.c"
		status=1
	fi
done
if ! ldd "$lib" 2>/dev/null | grep -q 'libjemalloc'; then
	echo "FAIL: $lib does not name libjemalloc as a dependency (ldd)"
	status=1
fi
[ "$status" = 0 ] && echo "heap-api: $lib calls mallocx/sdallocx/dallocx/rallocx/mallctl, no libc allocator"
exit $status
