#!/usr/bin/env bash
# The test command: installs what is missing, builds in build/, runs every
# test but the nightly soak (scripts/sim_soak.sh runs that). Extra
# arguments go to ctest (e.g. -R ssp, -L install).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
bash scripts/build.sh build
# Three at a time, the training runs (label `training`, each a few busy
# processes) one at a time among them (the build's resource spec,
# tests/ctest_resources.json): most other tests wait on timeouts and peers,
# and fill the cores the training leaves.
ctest --test-dir build --output-on-failure -j3 --timeout 300 --no-tests=error \
  -LE nightly "$@"
