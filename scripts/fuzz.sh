#!/usr/bin/env bash
# Runs each libFuzzer harness of tests/fuzz for a fixed time (as many at
# once as there are cores), starting from the seed corpus, under ASan +
# UBSan; fails on a crash, leak, undefined behaviour or broken invariant
# (the harness aborts), leaving the input that did it in the working
# corpus directory printed.
#
#   scripts/fuzz.sh BUILD_DIR [SECONDS_EACH]   # default 20 s each
#
# BUILD_DIR is a build configured with -DCMAKE_CXX_COMPILER=clang++
# -DDUCTILE_FUZZ=ON (the fuzzers and tests/fuzz/seeds are built there).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [SECONDS_EACH]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=${2:-20}
fuzz_dir=$build/tests/fuzz
[[ -f $fuzz_dir/seeds/made ]] ||
  { echo "fuzz.sh: no seed corpus in $fuzz_dir (configure with -DDUCTILE_FUZZ=ON)" >&2; exit 2; }

work=$(mktemp -d /tmp/ductile-fuzz-XXXXXX)
fuzzers=(header_fuzzer data_frames_fuzzer table_config_fuzzer
  checkpoint_record_fuzzer)
# One fuzzer per core at a time (each runs on one thread).
parallel=$(nproc)

# Runs one fuzzer; its exit status says whether it found something.
run() {
  local fuzzer=$1 corpus=$work/$1
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$fuzz_dir/$fuzzer" -max_total_time="$seconds" -max_len=4096 \
    -artifact_prefix="$corpus/" -print_final_stats=1 "$corpus" \
    >"$work/$fuzzer.log" 2>&1
}

failed=()
for ((first = 0; first < ${#fuzzers[@]}; first += parallel)); do
  batch=("${fuzzers[@]:first:parallel}")
  pids=()
  for fuzzer in "${batch[@]}"; do
    corpus=$work/$fuzzer
    mkdir -p "$corpus"
    cp "$fuzz_dir/seeds/$fuzzer"/* "$corpus/"
    echo "fuzz.sh: $fuzzer for ${seconds} s ($(ls "$corpus" | wc -l) seeds)"
    run "$fuzzer" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    fuzzer=${batch[$i]}
    if wait "${pids[$i]}"; then
      echo "fuzz.sh: $fuzzer:"
      grep -E "^stat::number_of_executed_units|^stat::new_units_added" \
        "$work/$fuzzer.log" | sed "s/^/  /"
    else
      echo "fuzz.sh: $fuzzer FAILED; the input is in $work/$fuzzer (crash-*):"
      tail -n 40 "$work/$fuzzer.log"
      failed+=("$fuzzer")
    fi
  done
done
if ((${#failed[@]} > 0)); then
  echo "fuzz.sh: failed: ${failed[*]} (work directory $work kept)"
  exit 1
fi
rm -rf "$work"
echo "fuzz.sh: every fuzzer ran ${seconds} s without a finding"
