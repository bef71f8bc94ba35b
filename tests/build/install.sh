#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# meson install gives a usable library and programs: install the build into
# a temporary DESTDIR, compile README.md's embedding example against it with
# pkg-config alone (PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR into that
# DESTDIR), run it, and run the installed rqbench, rqnbd and nullq, each
# with LD_LIBRARY_PATH naming only the installed library directory.  Also:
# the uninstalled .pc puts neither the source nor the build root on the
# include path, and librequest.pc names its private dependencies.
#
#   install.sh BUILD_ROOT SOURCE_ROOT PREFIX LIBDIR BINDIR CC [CFLAGS...]
set -u

build=$1 src=$2 prefix=$3 libdir=$4 bindir=$5
shift 5
tmp=$(mktemp -d /tmp/rq-install.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

command -v pkg-config >/dev/null || { echo "no pkg-config: skipped"; exit 77; }

# 1. install
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $bindir in /*) ;; *) bindir=$prefix/$bindir ;; esac
DESTDIR=$tmp/dest meson install -C "$build" --no-rebuild >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "meson install into DESTDIR failed"; }
lib=$tmp/dest$libdir
[ -f "$lib/pkgconfig/librequest.pc" ] || fail "no librequest.pc in $lib/pkgconfig"
for p in rqbench rqnbd; do
	[ -x "$tmp/dest$bindir/$p" ] || fail "$p not installed in $bindir"
done
for p in rqbench rqnbd nullq hddbench; do
	[ -f "$tmp/dest$prefix/share/man/man1/$p.1" ] || fail "no man page $p.1"
done
echo "ok: installed into DESTDIR $tmp/dest$prefix"

# 2. the .pc files
# a static-only build lists them in Requires (meson: a static library in
# Libs makes its dependencies public)
grep -Eq '^Requires(\.private)?:.*liburcu-bp' "$lib/pkgconfig/librequest.pc" ||
	fail "librequest.pc: no Requires.private with liburcu-bp"
grep -q '^URL: ' "$lib/pkgconfig/librequest.pc" || fail "librequest.pc: no URL"
unpc=$build/meson-uninstalled/librequest-uninstalled.pc
if grep -Eq '^Cflags:.*-I\$\{(srcdir|prefix)\}( |$)' "$unpc"; then
	fail "uninstalled .pc puts a root on the include path: $(grep '^Cflags' "$unpc")"
fi
echo "ok: librequest.pc and librequest-uninstalled.pc"

# 3. README's embedding example, through pkg-config only
awk '/^## Embedding/ { s = 1 } s && /^```c$/ { c = 1; next } c && /^```$/ { exit } c' \
	"$src/README.md" >"$tmp/hello.c"
[ -s "$tmp/hello.c" ] || fail "no C example under '## Embedding' in README.md"
static=
[ -e "$lib/librequest.so" ] || static=--static
flags=$(PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$tmp/dest \
	pkg-config $static --cflags --libs librequest) || fail "pkg-config librequest failed"
echo "pkg-config $static --cflags --libs librequest: $flags"
# shellcheck disable=SC2086 # the flags are words
"$@" -o "$tmp/hello" "$tmp/hello.c" $flags || fail "README example does not compile: $* $flags"
out=$(LD_LIBRARY_PATH=$lib "$tmp/hello") || fail "README example exited $?: $out"
echo "hello: $out"
if [ -z "$static" ]; then
	LD_LIBRARY_PATH=$lib ldd "$tmp/hello" | grep -q "$lib/librequest.so" ||
		fail "hello does not load the installed librequest.so: $(LD_LIBRARY_PATH=$lib ldd "$tmp/hello")"
fi

# 4. the installed programs run
out=$(LD_LIBRARY_PATH=$lib "$tmp/dest$bindir/rqbench" --ops 2000 --warmup 0 2>&1) ||
	fail "installed rqbench failed: $out"
echo "rqbench: $out"
out=$(LD_LIBRARY_PATH=$lib "$tmp/dest$bindir/rqnbd" --list-scheds 2>&1) ||
	fail "installed rqnbd --list-scheds failed: $out"
echo "rqnbd --list-scheds: $(echo "$out" | tr '\n' ' ')"
out=$(LD_LIBRARY_PATH=$lib "$tmp/dest$bindir/nullq" 2>&1) || fail "installed nullq failed: $out"
echo "ok: installed programs run"
