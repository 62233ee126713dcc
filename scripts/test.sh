#!/usr/bin/env bash
# The test command: installs what is missing, builds in build/, runs every
# test but the nightly soak (scripts/sim_soak.sh runs that). Extra
# arguments go to ctest (e.g. -R ssp, -L install).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
bash scripts/build.sh build
ctest --test-dir build --output-on-failure -j2 --timeout 300 --no-tests=error \
  -LE nightly "$@"
