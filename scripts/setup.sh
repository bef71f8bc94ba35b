#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Install what librequest needs on Debian 12 (as root, or with sudo), then
# configure (-Dwerror=true) and build it in build/ (or $BUILD_DIR).  Idempotent: apt is
# skipped when every package is already installed, and an existing build
# directory is reconfigured rather than made again.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}

packages=(
	# build and tests
	meson ninja-build pkg-config gcc g++
	liburcu-dev libjemalloc-dev libnuma-dev libcmocka-dev liburing-dev
	# benchmarks and integration tests: peers and clients
	qemu-utils qemu-block-extra fio libnbd-bin python3-libnbd nbdkit
	# ABI: abidw/abidiff for the build test abi-baseline (scripts/abi-check.sh)
	abigail-tools
	# observability: blkparse/btt read the traces; gnuplot draws the plots
	blktrace gnuplot-nox
	# rqnbd: TLS (GnuTLS, certtool for the tests' certificates); fuzzing the parser
	libgnutls28-dev gnutls-bin clang libclang-rt-14-dev
	# the RBD driver and its one-node test cluster
	librbd-dev librados-dev ceph-mon ceph-osd ceph-common
)

if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
	missing=()
	for p in "${packages[@]}"; do
		if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$'; then
			missing+=("$p")
		fi
	done
	if ((${#missing[@]})); then
		echo "setup: installing ${missing[*]}"
		sudo=()
		if [[ $(id -u) != 0 ]]; then
			if ! command -v sudo >/dev/null 2>&1; then
				echo "setup: missing packages and not root: apt-get install ${missing[*]}" >&2
				exit 1
			fi
			sudo=(sudo)
		fi
		export DEBIAN_FRONTEND=noninteractive
		"${sudo[@]}" apt-get update -q
		"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
	else
		echo "setup: all packages present"
	fi
else
	echo "setup: not a Debian system; make sure these (or equivalents) are installed:" >&2
	echo "setup:   ${packages[*]}" >&2
fi

# -Dwerror=true: CI builds treat every warning as an error.
if [[ -f $build_dir/build.ninja ]]; then
	meson setup --reconfigure "$build_dir" -Dwerror=true ||
		meson setup --wipe "$build_dir" -Dwerror=true
else
	meson setup "$build_dir" -Dwerror=true
fi
ninja -C "$build_dir"
