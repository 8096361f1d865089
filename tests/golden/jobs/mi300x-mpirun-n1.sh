#!/bin/bash
# commbench job golden: experiment interconnect on mi300x, 1 node(s) x 8 rank(s), mpirun
# Rendered by `commbench jobs render`; every value is shell-quoted. Re-render rather than edit.
#SBATCH -J cb-interconnect-n1
#SBATCH -N 1
#SBATCH -n 8
#SBATCH --ntasks-per-node=8
#SBATCH -c 16
#SBATCH --gpus-per-node=8
#SBATCH -t 00:30:00
#SBATCH --exclusive
#SBATCH -o /scratch/results/mi300x/golden/slurm-%j.out

set -uo pipefail

RUN_DIR=/scratch/results/mi300x/golden
PYTHON=python3
export COMMBENCH_SYSTEM=mi300x
export COMMBENCH_RUN_ID=golden
export PYTHONUNBUFFERED=1

failures=()

# The sentinel: `ready` when every step succeeded, `error` (with the reasons) otherwise.
finish() {
    local status=$?
    cd "$RUN_DIR" || return
    if [ "$status" -eq 0 ] && [ "${#failures[@]}" -eq 0 ]; then
        date -u +%Y-%m-%dT%H:%M:%SZ >ready
    else
        {
            echo "exit status $status"
            printf '%s\n' "${failures[@]}"
        } >error
    fi
}
# Why SIGTERM came: Slurm's step daemon writes "*** JOB N ON HOST CANCELLED AT T ***"
# (with "DUE TO TIME LIMIT" on a timeout) to the job's output before it signals.
stopped_why() {
    local said=""
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        said=$(grep -ho 'CANCELLED AT [^*]*' "slurm-$SLURM_JOB_ID.out" 2>/dev/null | tail -n 1)
    fi
    case "$said" in
        *"TIME LIMIT"*) echo "time limit reached" ;;
        "") echo "time limit or scancel" ;;
        *) echo "job cancelled (scancel): $said" ;;
    esac
}
trap finish EXIT
trap 'failures+=("terminated by SIGTERM: $(stopped_why)"); exit 143' TERM

mkdir -p "$RUN_DIR/logs" && cd "$RUN_DIR" || exit 1
rm -f ready error

# Open MPI's mpirun inside the allocation: tasks-per-node ranks on every node
# (each through the profile's rank wrapper, if it has one).
launch() {
    mpirun --bind-to none -n 8 --map-by ppr:8:node "$@"
}

# Run one step on every rank; its output goes to logs/NAME.log and to the job's output,
# its exit status to $step_status.
run_step() {
    local name=$1
    shift
    echo "[$(date -u +%H:%M:%S)] $name"
    launch "$@" 2>&1 | tee "logs/$name.log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
        local where
        where=$("$PYTHON" -m commbench.jobs.joblog "logs/$name.log" 8 2>/dev/null)
        failures+=("$name: exit status $rc${where:+ on $where} (logs/$name.log)")
    fi
    # shellcheck disable=SC2034  # read after external baselines' steps (when there are any)
    step_status=$rc
}

# An external baseline that cannot run here: one line in the job log and skipped.txt.
skip_external() {
    echo "skipped $1: $2" | tee -a skipped.txt
}

# Turn an external baseline's log into records (commbench import); a failure is the job's.
import_external() {
    local name=$1
    shift
    if ! "$PYTHON" -m commbench import "$@"; then
        failures+=("$name: commbench import failed (see the job output)")
    fi
}

if ! module load rocm; then
    failures+=("module load failed")
    exit 1
fi
export HSA_FORCE_FINE_GRAIN_PCIE=1
export NCCL_IB_GID_INDEX=3
export NCCL_SOCKET_IFNAME=eth0
rocm_version=$(cat "${ROCM_PATH:-/opt/rocm}/.info/version" 2>/dev/null || echo unknown)
rccl_libs=("${ROCM_PATH:-/opt/rocm}"/lib/librccl.so.*)
echo "rocm $rocm_version; rccl ${rccl_libs[*]}" >rccl-version.txt
case "$rocm_version" in 6.* | 7.0.*) export RCCL_MSCCL_ENABLE="${RCCL_MSCCL_ENABLE:-0}" ;; *) unset RCCL_MSCCL_ENABLE ;; esac

# What the job ran on, next to its results.
env | sort >env.txt
if type module >/dev/null 2>&1; then
    module list >module-list.txt 2>&1
else
    echo "no module command on $(hostname)" >module-list.txt
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi topo -m >topology.txt 2>&1
elif command -v rocm-smi >/dev/null 2>&1; then
    rocm-smi --showtopo >topology.txt 2>&1
fi
if [ -n "${SLURM_JOB_ID:-}" ]; then
    scontrol show job "$SLURM_JOB_ID" >scontrol-show-job.txt 2>&1
fi
printf '%s\n' 'alltoallv fast: not registered' 'allreduce nccl-tests: does not run on rocm' 'allgather nccl-tests: does not run on rocm' 'reducescatter nccl-tests: does not run on rocm' 'broadcast nccl-tests: does not run on rocm' >skipped.txt
echo "skipped (see skipped.txt):"
cat skipped.txt

run_step 01-allreduce-nvrar "$PYTHON" -m commbench run allreduce --impl nvrar --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d bf16 --out /scratch/results/mi300x/golden/results.jsonl
run_step 02-allreduce-rccl "$PYTHON" -m commbench run allreduce --impl rccl --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d bf16 --out /scratch/results/mi300x/golden/results.jsonl
run_step 03-allreduce-mpi "$PYTHON" -m commbench run allreduce --impl mpi --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --out /scratch/results/mi300x/golden/results.jsonl
run_step 04-alltoallv-fanout "$PYTHON" -m commbench run alltoallv --impl fanout --backend rocm -b 1M -e 64M -f 8 -n 20 -w 5 -c 1 --workload zipf:0.8 --out /scratch/results/mi300x/golden/results.jsonl
run_step 05-alltoallv-mpi "$PYTHON" -m commbench run alltoallv --impl mpi --backend rocm -b 1M -e 64M -f 8 -n 20 -w 5 -c 1 --workload zipf:0.8 --out /scratch/results/mi300x/golden/results.jsonl
run_step 06-allgather-rccl "$PYTHON" -m commbench run allgather --impl rccl --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 07-allgather-ring "$PYTHON" -m commbench run allgather --impl ring --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 08-allgather-mpi "$PYTHON" -m commbench run allgather --impl mpi --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 09-reducescatter-rccl "$PYTHON" -m commbench run reducescatter --impl rccl --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 10-reducescatter-ring "$PYTHON" -m commbench run reducescatter --impl ring --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 11-reducescatter-mpi "$PYTHON" -m commbench run reducescatter --impl mpi --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 12-broadcast-rccl "$PYTHON" -m commbench run broadcast --impl rccl --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 13-broadcast-tree "$PYTHON" -m commbench run broadcast --impl tree --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
run_step 14-broadcast-mpi "$PYTHON" -m commbench run broadcast --impl mpi --backend rocm -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/mi300x/golden/results.jsonl
skip_external 15-allreduce-rccl_tests-all_reduce_perf 'rccl-tests not configured: set COMMBENCH_RCCL_TESTS, --set rccl_tests=DIR or rccl_tests in the site file'
skip_external 16-allreduce-osu-osu_allreduce 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 17-allgather-rccl_tests-all_gather_perf 'rccl-tests not configured: set COMMBENCH_RCCL_TESTS, --set rccl_tests=DIR or rccl_tests in the site file'
skip_external 18-allgather-osu-osu_allgather 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 19-reducescatter-rccl_tests-reduce_scatter_perf 'rccl-tests not configured: set COMMBENCH_RCCL_TESTS, --set rccl_tests=DIR or rccl_tests in the site file'
skip_external 20-reducescatter-osu-osu_reduce_scatter 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 21-broadcast-rccl_tests-broadcast_perf 'rccl-tests not configured: set COMMBENCH_RCCL_TESTS, --set rccl_tests=DIR or rccl_tests in the site file'
skip_external 22-broadcast-osu-osu_bcast 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
