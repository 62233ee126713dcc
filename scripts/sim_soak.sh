#!/usr/bin/env bash
# The simulation soak: many more seeds than CI runs (docs/simulation.md).
#
#   scripts/sim_soak.sh [SEEDS]     (default 20000; builds build/ first)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seeds=${1:-20000}
bash scripts/build.sh build >/dev/null
DUCTILE_SIM_SEEDS=$seeds build/tests/simulation_test \
  --gtest_filter='SimulationSoak.*' 2>&1 | grep -v '^[IWE][0-9]\{8\} '
