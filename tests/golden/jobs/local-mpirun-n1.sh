#!/bin/bash
# commbench job golden: experiment interconnect on local, 1 node(s) x 4 rank(s), mpirun
# Rendered by `commbench jobs render`; every value is shell-quoted. Re-render rather than edit.
#SBATCH -J cb-interconnect-n1
#SBATCH -N 1
#SBATCH -n 4
#SBATCH --ntasks-per-node=4
#SBATCH -c 1
#SBATCH -t 00:30:00
#SBATCH -o /scratch/results/local/golden/slurm-%j.out

set -uo pipefail

RUN_DIR=/scratch/results/local/golden
PYTHON=/opt/commbench/.venv/bin/python
export COMMBENCH_SYSTEM=local
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
    /opt/commbench/.venv/bin/mpirun --oversubscribe -n 4 --map-by ppr:4:node "$@"
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
        where=$("$PYTHON" -m commbench.jobs.joblog "logs/$name.log" 4 2>/dev/null)
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

export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_osc='^ucx'

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
printf '%s\n' 'alltoallv fast: not registered' 'allreduce nccl-tests: does not run on cpu' 'allreduce rccl-tests: does not run on cpu' 'allgather nccl-tests: does not run on cpu' 'allgather rccl-tests: does not run on cpu' 'reducescatter nccl-tests: does not run on cpu' 'reducescatter rccl-tests: does not run on cpu' 'broadcast nccl-tests: does not run on cpu' 'broadcast rccl-tests: does not run on cpu' >skipped.txt
echo "skipped (see skipped.txt):"
cat skipped.txt

run_step 01-allreduce-nvrar "$PYTHON" -m commbench run allreduce --impl nvrar --backend cpu --gpus-per-node 2 -b 64K -e 256K -f 4 -n 10 -w 2 -c 1 -d bf16 --out /scratch/results/local/golden/results.jsonl
run_step 02-allreduce-mpi "$PYTHON" -m commbench run allreduce --impl mpi --backend cpu --gpus-per-node 2 -b 64K -e 256K -f 4 -n 10 -w 2 -c 1 -d bf16 --out /scratch/results/local/golden/results.jsonl
run_step 03-alltoallv-fanout "$PYTHON" -m commbench run alltoallv --impl fanout --backend cpu --gpus-per-node 2 -b 64K -e 256K -f 4 -n 5 -w 1 -c 1 --workload zipf:0.8 --out /scratch/results/local/golden/results.jsonl
run_step 04-alltoallv-mpi "$PYTHON" -m commbench run alltoallv --impl mpi --backend cpu --gpus-per-node 2 -b 64K -e 256K -f 4 -n 5 -w 1 -c 1 --workload zipf:0.8 --out /scratch/results/local/golden/results.jsonl
run_step 05-allgather-ring "$PYTHON" -m commbench run allgather --impl ring --backend cpu --gpus-per-node 2 -b 256K -e 256K -f 4 -n 5 -w 1 -c 1 -d float32 --inplace both --out /scratch/results/local/golden/results.jsonl
run_step 06-allgather-mpi "$PYTHON" -m commbench run allgather --impl mpi --backend cpu --gpus-per-node 2 -b 256K -e 256K -f 4 -n 5 -w 1 -c 1 -d float32 --inplace both --out /scratch/results/local/golden/results.jsonl
run_step 07-reducescatter-ring "$PYTHON" -m commbench run reducescatter --impl ring --backend cpu --gpus-per-node 2 -b 256K -e 256K -f 4 -n 5 -w 1 -c 1 -d float32 --inplace both --out /scratch/results/local/golden/results.jsonl
run_step 08-reducescatter-mpi "$PYTHON" -m commbench run reducescatter --impl mpi --backend cpu --gpus-per-node 2 -b 256K -e 256K -f 4 -n 5 -w 1 -c 1 -d float32 --inplace both --out /scratch/results/local/golden/results.jsonl
run_step 09-broadcast-tree "$PYTHON" -m commbench run broadcast --impl tree --backend cpu --gpus-per-node 2 -b 256K -e 256K -f 4 -n 5 -w 1 -c 1 -d float32 --inplace both --out /scratch/results/local/golden/results.jsonl
run_step 10-broadcast-mpi "$PYTHON" -m commbench run broadcast --impl mpi --backend cpu --gpus-per-node 2 -b 256K -e 256K -f 4 -n 5 -w 1 -c 1 -d float32 --inplace both --out /scratch/results/local/golden/results.jsonl
skip_external 11-allreduce-osu-osu_allreduce 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 12-allgather-osu-osu_allgather 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 13-reducescatter-osu-osu_reduce_scatter 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 14-broadcast-osu-osu_bcast 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
