#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Set up and build librequest (scripts/setup.sh), then run the short
# benchmark demo, bench/demo.sh: rqbench over the front ends and schedulers
# the build offers, then the peers in quick mode.  Arguments go to
# bench/demo.sh (e.g. --seconds 2).  BUILD_DIR renames build/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${BUILD_DIR:-build}

if [[ ! -f bench/demo.sh ]]; then
	echo "demo: bench/demo.sh is missing (not written yet)" >&2
	exit 1
fi

scripts/setup.sh
exec bash bench/demo.sh --build "$build_dir" "$@"
