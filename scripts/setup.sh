#!/usr/bin/env bash
# Installs every Debian package ductile needs to build, test and plot.
#
# Idempotent and quick when nothing is missing: it asks dpkg first and runs
# apt-get (update + install) only for packages that are not installed.
# Runs as root as is (CI); otherwise through sudo when sudo exists.
# The comments beside each package say what it provides.
set -euo pipefail

packages=(
  build-essential cmake pkg-config g++
  libzmq3-dev cppzmq-dev               # cppzmq is only a Recommends: name it
  libprotobuf-dev protobuf-compiler
  librocksdb-dev
  libgflags-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev
  libcpp-httplib-dev                   # the coordinator's /metrics
  dataset-fashion-mnist                # /usr/share/datasets/fashion-mnist/
  clang-format python3
  python3-yaml                         # parses `ductile k8s` output (tests)
  clang                                # the -Wthread-safety build (CI)
  gnuplot-nox                          # plots of benchmark results
  slurm-wlm munge                      # a real single-node Slurm (tests/slurm_test.sh)
  python3-dev pybind11-dev python3-pybind11  # the Python package (python/)
  python3-numpy python3-pytest         # its tests (tests/python/)
  python3-torch                        # CPU tensors in its tests (about 220 packages)
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ $EUID -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: missing ${missing[*]}, and not root with no sudo to install them" >&2
  exit 1
fi

run() {
  echo "setup: $*"
  "$@"
}

echo "setup: missing ${missing[*]}"
run "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
run "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Use-Pty=0 \
  --no-install-recommends "${missing[@]}" </dev/null
echo "setup: done"
