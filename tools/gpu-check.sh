#!/usr/bin/env bash
# The one-GPU check: the wheel set is fetched on a machine with network, the check runs
# offline on a GPU machine (README, "GPU check").
#
#   tools/gpu-check.sh fetch [--cuda 13|12] [--here]   # make gpu-wheels: the set into .gpu-wheels/
#   tools/gpu-check.sh run OUT [gpucheck options]      # make gpu-check (the GPU machine's command)
#
# fetch downloads the binary wheels a GPU machine with CuPy, mpi4py, numpy and numba but no
# MPI library, no nvshmem4py and no pydantic lacks (suite/gpucheck/wheelset.py, GROUPS), for
# CPython 3.12 on manylinux x86-64 (--here: for this machine's Python), into .gpu-wheels.part/,
# checks the set is whole and consistent, writes its MANIFEST.json, and only then replaces
# .gpu-wheels/ (git-ignored). A failure leaves .gpu-wheels/ as it was and no .part behind.
#
# run writes everything into OUT from its first line on: gpu-check.log (the whole output),
# preflight.txt, summary.txt/summary.json and runs.tar.gz, never more than the 8 files a GPU
# machine sends back. It refuses at once (exit 2, the reason in OUT/summary.txt) a wheel set
# that is missing, incomplete, altered or for another Python; installs, for each package
# group the machine lacks or holds older, the whole group from the set with
# `pip install --no-index --no-deps --ignore-installed --prefix .gpu-site` (not --target,
# which drops the Open MPI wheel's lib/ with libmpi), then commbench itself there, puts
# .gpu-site on PYTHONPATH, PATH and LD_LIBRARY_PATH (no venv: the machine's python3 may
# itself be a venv, whose packages a venv made from it would not see), writes preflight.txt
# and runs `python3 -m commbench.gpucheck`. The whole run keeps within GPU_CHECK_LIMIT
# seconds (default 400): the checks get what setup left of it.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS=${GPU_WHEELS:-$ROOT/.gpu-wheels}
SITE=${GPU_SITE:-$ROOT/.gpu-site}
WORK=${GPU_WORK:-$ROOT/.gpu-work}
PYTHON=${PYTHON:-python3}
LIMIT=${GPU_CHECK_LIMIT:-400}
WHEELSET=$ROOT/suite/gpucheck/wheelset.py
PLATFORM_ARGS=(--python-version 3.12 --implementation cp
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

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
  local target=() reqs=()
  [ "$here" = 1 ] || target=("${PLATFORM_ARGS[@]}")
  mapfile -t reqs < <("$PYTHON" "$WHEELSET" requirements --cuda "$cuda")
  [ ${#reqs[@]} -gt 0 ] || die "$PYTHON cannot run $WHEELSET"
  PART="$WHEELS.part"
  trap 'rm -rf "$PART"' EXIT
  rm -rf "$PART"
  mkdir -p "$PART" || die "cannot make $PART"
  "$PYTHON" -m pip download --quiet --timeout 30 --retries 2 --no-deps --only-binary=:all: \
    "${target[@]}" -d "$PART" "${reqs[@]}" ||
    die "the download failed (output above): $WHEELS is left as it was"
  "$PYTHON" "$WHEELSET" seal "$PART" --cuda "$cuda" ||
    die "the downloaded set is not usable (line above): $WHEELS is left as it was"
  rm -rf "$WHEELS.old"
  if [ -e "$WHEELS" ]; then mv "$WHEELS" "$WHEELS.old" || die "cannot move $WHEELS aside"; fi
  mv "$PART" "$WHEELS" || die "cannot move $PART to $WHEELS"
  rm -rf "$WHEELS.old"
  trap - EXIT
  echo "gpu-check: the set is in $WHEELS; carry it (git-ignored) with the GPU call"
}

# ---------------------------------------------------------------- run

OUT_DIR="" STEP="starting" TEE_PID="" STOPPED=0

# summary.txt/json for a run that ended before any check: why, and where the log is.
setup_summary() {
  local status=$1 reason=$2
  printf '# commbench gpu-check: no check ran: %s\n# %s\n# see gpu-check.log and preflight.txt\n' \
    "$status" "$reason" >"$OUT_DIR/summary.txt"
  "$PYTHON" - "$OUT_DIR/summary.json" "$status" "$reason" <<'EOF' 2>/dev/null || true
import json, sys
doc = {"setup": sys.argv[2], "reason": sys.argv[3], "checks": []}
open(sys.argv[1], "w").write(json.dumps(doc, indent=2) + "\n")
EOF
}

# The next setup step, in OUT/summary.txt too: a call cut off during setup (the GPU call's
# timeout kills without a word) still leaves where it was.
step() {
  STEP=$1
  setup_summary "setup did not finish" "it was $STEP"
}

# Setup cannot go on: the reason on screen, in the log and in OUT/summary.txt.
stop() {
  local code=$1
  shift
  echo "gpu-check: $*" >&2
  setup_summary "$([ "$code" = 2 ] && echo refused || echo 'setup failed')" "$*"
  STOPPED=1
  exit "$code"
}

finish() {
  local code=$?
  trap - EXIT TERM INT
  if [ "$STOPPED" = 0 ] && ! grep -q '^# commbench gpu-check: [0-9]' "$OUT_DIR/summary.txt" 2>/dev/null; then
    setup_summary "setup failed" "ended while $STEP (exit status $code)"
    echo "gpu-check: ended while $STEP (exit status $code)" >&2
  fi
  "$PYTHON" "$WHEELSET" limit-out "$OUT_DIR" || true
  echo "gpu-check: exit status $code after $SECONDS s; $OUT_DIR holds: $(find "$OUT_DIR" -type f -printf '%P ')"
  exec >&- 2>&-
  [ -z "$TEE_PID" ] || wait "$TEE_PID" 2>/dev/null || true
  exit "$code"
}

run() {
  [ $# -ge 1 ] || die "run needs an output folder: tools/gpu-check.sh run OUT_DIR"
  mkdir -p "$1" 2>/dev/null || die "cannot make the output folder $1"
  OUT_DIR=$(cd "$1" && pwd)
  shift
  rm -f "$OUT_DIR/summary.txt" "$OUT_DIR/summary.json" "$OUT_DIR/preflight.txt" \
    "$OUT_DIR/gpu-check.log" "$OUT_DIR/runs.tar.gz" "$OUT_DIR/extra.tar.gz"
  exec > >(tee -a "$OUT_DIR/gpu-check.log") 2>&1
  TEE_PID=$!
  trap finish EXIT
  export PYTHONUNBUFFERED=1  # every line in the log at once: the call may be cut off
  trap 'exit 143' TERM
  trap 'exit 130' INT
  echo "gpu-check: $(date -u '+%F %T') UTC on $(uname -n), $(uname -sr); $PYTHON is" \
    "$(command -v "$PYTHON" || echo missing); limit $LIMIT s"
  command -v "$PYTHON" >/dev/null || stop 3 "no $PYTHON on PATH"
  [ -z "${COMMBENCH_GPUCHECK_REHEARSAL:-}" ] ||
    echo "gpu-check: REHEARSAL (COMMBENCH_GPUCHECK_REHEARSAL is set): fake GPU modules, rehearsal-only checks"

  step "checking the wheel set $WHEELS"
  local plan errors code
  errors=$(mktemp) || stop 3 "mktemp failed"
  plan=$("$PYTHON" "$WHEELSET" plan "$WHEELS" 2>"$errors")
  code=$?
  cat "$errors" >&2
  if [ "$code" != 0 ]; then
    stop "$([ "$code" = 2 ] && echo 2 || echo 3)" \
      "$(tail -n 1 "$errors" | sed 's/^gpu-check: //') (exit status $code)"
  fi
  rm -f "$errors"
  local wheels=()
  mapfile -t wheels <<<"$plan"
  [ -n "$plan" ] || wheels=()

  step "installing the carried wheels into $SITE"
  local sitepkg stamp
  sitepkg=$("$PYTHON" -c 'import sys, sysconfig
print(sysconfig.get_path("purelib", "posix_prefix", {"base": sys.argv[1], "platbase": sys.argv[1]}))' "$SITE") ||
    stop 3 "$PYTHON cannot tell where packages go under $SITE"
  stamp=$(cat "$WHEELS/MANIFEST.json" - <<<"$plan" | cksum)
  if [ "$(cat "$SITE/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "gpu-check: $SITE already holds this set (an earlier run on this machine)"
  else
    rm -rf "$SITE"
    mkdir -p "$SITE" || stop 3 "cannot make $SITE"
    if [ ${#wheels[@]} -gt 0 ]; then
      "$PYTHON" -m pip install --quiet --no-index --no-deps --ignore-installed \
        --no-compile --no-warn-script-location --prefix "$SITE" "${wheels[@]}" ||
        stop 3 "pip could not install the carried wheels (output above)"
    fi
    echo "$stamp" >"$SITE/.stamp"
  fi
  export PYTHONPATH="$sitepkg${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$SITE/bin:$PATH"
  export LD_LIBRARY_PATH="$SITE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ -x "$SITE/bin/mpiexec" ]; then
    export MPIEXEC="$SITE/bin/mpiexec" MPI4PY_LIBMPI="$SITE/lib/libmpi.so.40"
  fi

  step "installing commbench into $SITE"
  rm -rf "$sitepkg/commbench" "$sitepkg"/commbench-*.dist-info
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-build-isolation --ignore-installed \
    --no-compile --no-warn-script-location --prefix "$SITE" "$ROOT" ||
    stop 3 "could not install commbench (needs setuptools 64 or later: the set's 'build' group)"

  step "writing preflight.txt"
  cd "$ROOT" || stop 3 "cannot enter $ROOT"
  local limit=()
  if command -v timeout >/dev/null; then limit=(timeout -k 5 120); fi
  "${limit[@]}" "$PYTHON" "$WHEELSET" preflight | tee "$OUT_DIR/preflight.txt"
  "$PYTHON" -c 'import commbench.gpucheck' || stop 3 "commbench does not import (preflight.txt)"

  STEP="running the checks"
  local left=$((LIMIT - SECONDS - 10))
  [ "$left" -gt 15 ] || stop 3 "setup took $SECONDS s of the $LIMIT s limit: no time left for checks"
  rm -rf "$WORK"
  "$PYTHON" -m commbench.gpucheck "$OUT_DIR" --work "$WORK" --time-left "$left" "$@"
}

case ${1:-} in
  fetch) shift; fetch "$@" ;;
  run) shift; run "$@" ;;
  *) die "usage: tools/gpu-check.sh fetch [--cuda 12|13] [--here] | run OUT_DIR [options]" ;;
esac
