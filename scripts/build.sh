#!/usr/bin/env bash
# Configures and builds ductile.
#
#   scripts/build.sh [build-dir] [extra cmake args...]
#
# build-dir defaults to build/ in the source tree; a relative one is taken
# from the current directory. Extra arguments go to the configure step after
# the defaults, so they may override them (e.g. -DCMAKE_BUILD_TYPE=Debug).
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$source_dir/build}
if [[ $# -gt 0 ]]; then shift; fi

set -x
cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build_dir" -j "$(nproc)"
