#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The library's layers call only downward (lib/internal/queue.h has the
# picture).  Over the object files of librequest.so:
#   - an object of lib/ may reference a symbol of another lib/ object only
#     if that object's layer is lower than its own; the two front ends
#     (mq.c, sq.c) share a layer, so neither may reference the other;
#   - lib/ never references a scheduler's object, but for the built-in
#     registration table (elevator.c -> sched/builtin.c);
#   - a scheduler (sched/*.c) references only exported (public) symbols,
#     or the library's services (the lowest $services layers: the heap,
#     io contexts, tags, rb-trees, the clock, limits, bios).
# An object that appears in no layer below fails the test, so a new file
# must be placed.  Skipped (77) without nm.
# Usage: layers.sh OBJDIR LIBRARY.so
set -eu

objdir=$1
lib=$2
command -v nm >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }

# lowest first; one line a layer
layers='alloc
status clock rbtree tags
bio limits stats ioc elevator
trace
split
service
complete
merge
plug
core
flush attr
mq-sched
mq sq'
services=4

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# rank of every lib/ object
rank=0
echo "$layers" | while read -r line; do
	for o in $line; do
		echo "$o $rank"
	done
	rank=$((rank + 1))
done > "$tmp/rank"

nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u > "$tmp/exported"

status=0
# defs: "object symbol" for every global definition
for f in "$objdir"/*.o "$objdir"/.._sched_*.o; do
	[ -e "$f" ] || continue
	base=$(basename "$f" .c.o)
	base=${base#.._sched_}
	case $(basename "$f") in .._sched_*) kind=sched ;; *) kind=lib ;; esac
	nm --defined-only -g "$f" | awk -v o="$base" -v k="$kind" 'NF == 3 {print k, o, $3}'
done > "$tmp/defs"
for f in "$objdir"/*.o "$objdir"/.._sched_*.o; do
	[ -e "$f" ] || continue
	base=$(basename "$f" .c.o)
	base=${base#.._sched_}
	case $(basename "$f") in .._sched_*) kind=sched ;; *) kind=lib ;; esac
	if [ "$kind" = lib ] && ! grep -q "^$base " "$tmp/rank"; then
		echo "FAIL: lib/$base.c is in no layer (tests/build/layers.sh)"
		status=1
		continue
	fi
	nm -u "$f" | awk '{print $NF}' | while read -r sym; do
		def=$(awk -v s="$sym" '$3 == s {print $1, $2; exit}' "$tmp/defs")
		[ -n "$def" ] || continue    # libc, liburcu, ...
		dkind=${def% *}
		dobj=${def#* }
		[ "$dobj" = "$base" ] && [ "$dkind" = "$kind" ] && continue
		if [ "$kind" = sched ]; then
			[ "$dkind" = sched ] && continue
			r_to=$(awk -v o="$dobj" '$1 == o {print $2}' "$tmp/rank")
			[ -n "$r_to" ] && [ "$r_to" -lt "$services" ] && continue
			grep -qx "$sym" "$tmp/exported" ||
				echo "FAIL: sched/$base.c uses $sym of lib/$dobj.c, which is not public"
			continue
		fi
		if [ "$dkind" = sched ]; then
			[ "$base" = elevator ] && [ "$dobj" = builtin ] && continue
			echo "FAIL: lib/$base.c uses $sym of scheduler sched/$dobj.c"
			continue
		fi
		r_from=$(awk -v o="$base" '$1 == o {print $2}' "$tmp/rank")
		r_to=$(awk -v o="$dobj" '$1 == o {print $2}' "$tmp/rank")
		if [ -z "$r_to" ]; then
			echo "FAIL: lib/$dobj.c is in no layer (tests/build/layers.sh)"
		elif [ "$r_to" -ge "$r_from" ]; then
			echo "FAIL: lib/$base.c calls up or across: $sym of lib/$dobj.c"
		fi
	done
done > "$tmp/out"
if [ -s "$tmp/out" ]; then
	sort -u "$tmp/out"
	status=1
fi
n=$(wc -l < "$tmp/rank")
[ "$status" = 0 ] && echo "layers: $n lib objects, every reference points down"
exit $status
