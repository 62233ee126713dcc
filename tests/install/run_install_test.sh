#!/usr/bin/env bash
# Installs a built ductile into a temporary prefix, checks that the installed
# headers include none of ductile's private dependencies, then configures,
# builds and runs the outside project in tests/install/ against it.
#
#   run_install_test.sh <source-dir> <build-dir> [python]
#
# With a python interpreter, the installed Python package must import with
# it, from the prefix, and load the prefix's libductile (by its rpath: no
# LD_LIBRARY_PATH); where torch is installed, ductile.torch imports from
# there too.
#
# Exits non-zero on any failure; the temporary prefix is always removed.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 <source-dir> <build-dir> [python]" >&2
  exit 2
fi
source_dir=$1
build_dir=$2
python=${3:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ductile-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build_dir" --prefix "$prefix"
if [[ ! -f "$prefix/include/ductile/ductile.h" ]]; then
  echo "FAIL: ductile/ductile.h was not installed under $prefix/include" >&2
  exit 1
fi

# Public headers may include only the standard library and each other.
private='(zmq|rocksdb|\.pb\.h|google/protobuf|glog|gflags)'
if grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"][^>\"]*${private}" \
     "$prefix/include"; then
  echo "FAIL: installed headers include private dependencies (above)" >&2
  exit 1
fi
if find "$prefix/include" -name 'zmq*.h*' -o -name '*.pb.h' | grep .; then
  echo "FAIL: private headers were installed (above)" >&2
  exit 1
fi

cmake -S "$source_dir/tests/install" -B "$tmp/build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# Make sure it found the copy just installed, not one elsewhere on the system.
found=$(sed -n 's/^ductile_DIR:PATH=//p' "$tmp/build/CMakeCache.txt")
if [[ "$found" != "$prefix"/* ]]; then
  echo "FAIL: found ductile at '$found', not under $prefix" >&2
  exit 1
fi
cmake --build "$tmp/build"

lib=$(find "$prefix" -name 'libductile.so*' -print -quit)
if [[ -z "$lib" ]]; then
  echo "FAIL: no libductile.so under $prefix" >&2
  exit 1
fi
LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$tmp/build/embed"

if [[ -n "$python" ]]; then
  package=$(find "$prefix" -path '*-packages/ductile/__init__.py' -print -quit)
  if [[ -z "$package" ]]; then
    echo "FAIL: the Python package was not installed under $prefix" >&2
    exit 1
  fi
  env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$(dirname "$package")")" \
    "$python" - "$prefix" <<'EOF'
import sys
import ductile
prefix = sys.argv[1]
assert ductile.__file__.startswith(prefix), ductile.__file__
libs = [line.split()[-1] for line in open("/proc/self/maps") if "libductile.so" in line]
assert libs and all(lib.startswith(prefix) for lib in libs), libs
assert issubclass(ductile.Unavailable, ductile.DuctileError)
try:
    import torch  # noqa: F401
except ImportError:
    pass  # ductile.torch needs it
else:
    import ductile.torch as dt
    assert dt.__file__.startswith(prefix), dt.__file__
    assert dt.ElasticSampler.__module__ == "ductile._elastic"
print("installed package", ductile.__file__, "loads", libs[0])
EOF
fi
echo "install test passed"
