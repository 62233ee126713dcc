#!/usr/bin/env bash
# The worker example shown in README.md is examples/example_worker.cc, verbatim.
set -euo pipefail
root=$1
shown=$(sed -n '/<!-- example_worker.cc begin -->/,/<!-- example_worker.cc end -->/p' \
  "$root/README.md" | sed '1,2d;$d' | sed '$d')
if ! diff -u <(printf '%s\n' "$shown") "$root/examples/example_worker.cc"; then
  echo "README.md's example differs from examples/example_worker.cc (diff above)" >&2
  exit 1
fi
