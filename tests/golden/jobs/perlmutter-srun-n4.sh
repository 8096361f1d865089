#!/bin/bash
# commbench job golden: experiment interconnect on perlmutter, 4 node(s) x 4 rank(s), srun
# Rendered by `commbench jobs render`; every value is shell-quoted. Re-render rather than edit.
#SBATCH -J cb-interconnect-n4
#SBATCH -N 4
#SBATCH -n 16
#SBATCH --ntasks-per-node=4
#SBATCH -c 32
#SBATCH --gpus-per-node=4
#SBATCH -t 00:30:00
#SBATCH -A m1234_g
#SBATCH -C gpu
#SBATCH -q regular
#SBATCH -o /scratch/results/perlmutter/golden/slurm-%j.out

set -uo pipefail

RUN_DIR=/scratch/results/perlmutter/golden
PYTHON=python
export COMMBENCH_SYSTEM=perlmutter
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

# srun starts one rank per task; binding options come from the system profile.
launch() {
    srun --cpu-bind=cores --gpu-bind=none --nodes=4 --ntasks=16 --ntasks-per-node=4 "$@"
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

if ! module load PrgEnv-gnu cudatoolkit craype-accel-nvidia80 cray-mpich python nccl nvshmem; then
    failures+=("module load failed")
    exit 1
fi
export CUDA_DEVICE_MAX_CONNECTIONS=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export FI_CXI_OFLOW_BUF_COUNT=10
export FI_CXI_OFLOW_BUF_SIZE=1073741824
export FI_CXI_RDZV_EAGER_SIZE=0
export FI_CXI_RDZV_GET_MIN=0
export FI_CXI_RDZV_THRESHOLD=0
export FI_CXI_RX_MATCH_MODE=hybrid
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_PROVIDER=cxi
export MPICH_GPU_SUPPORT_ENABLED=1
export MPICH_OFI_NIC_POLICY=GPU
export NCCL_CROSS_NIC=1
export NCCL_NET='AWS Libfabric'
export NCCL_NET_GDR_LEVEL=PHB
export NCCL_SOCKET_IFNAME=hsn
export NVSHMEM_DISABLE_CUDA_VMM=1
export NVSHMEM_REMOTE_TRANSPORT=libfabric

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
printf '%s\n' 'alltoallv fast: not registered' 'allreduce rccl-tests: does not run on cuda' 'allgather rccl-tests: does not run on cuda' 'reducescatter rccl-tests: does not run on cuda' 'broadcast rccl-tests: does not run on cuda' >skipped.txt
echo "skipped (see skipped.txt):"
cat skipped.txt

# Calibration: a short NCCL/RCCL run with NCCL_DEBUG=INFO must show the expected network.
CALIBRATION_PATTERN='Using network AWS Libfabric'
(
    export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
    launch "$PYTHON" -m commbench run allreduce --impl nccl --backend cuda -b 1M -e 1M -n 5 -w 2 -c 1 --out /scratch/results/perlmutter/golden/calibration.jsonl
) >logs/calibration.log 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    failures+=("calibration: exit status $rc (logs/calibration.log)")
    exit 1
fi
if ! grep -Eq -- "$CALIBRATION_PATTERN" logs/calibration.log; then
    failures+=("calibration: no line of logs/calibration.log matches '$CALIBRATION_PATTERN': the network plugin did not load")
    exit 1
fi
echo "calibration: network OK ($CALIBRATION_PATTERN)"

run_step 01-allreduce-nvrar "$PYTHON" -m commbench run allreduce --impl nvrar --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d bf16 --out /scratch/results/perlmutter/golden/results.jsonl
run_step 02-allreduce-nccl "$PYTHON" -m commbench run allreduce --impl nccl --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d bf16 --out /scratch/results/perlmutter/golden/results.jsonl
run_step 03-allreduce-mpi "$PYTHON" -m commbench run allreduce --impl mpi --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --out /scratch/results/perlmutter/golden/results.jsonl
run_step 04-alltoallv-fanout "$PYTHON" -m commbench run alltoallv --impl fanout --backend cuda -b 1M -e 64M -f 8 -n 20 -w 5 -c 1 --workload zipf:0.8 --out /scratch/results/perlmutter/golden/results.jsonl
run_step 05-alltoallv-mpi "$PYTHON" -m commbench run alltoallv --impl mpi --backend cuda -b 1M -e 64M -f 8 -n 20 -w 5 -c 1 --workload zipf:0.8 --out /scratch/results/perlmutter/golden/results.jsonl
run_step 06-allgather-nccl "$PYTHON" -m commbench run allgather --impl nccl --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 07-allgather-ring "$PYTHON" -m commbench run allgather --impl ring --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 08-allgather-mpi "$PYTHON" -m commbench run allgather --impl mpi --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 09-reducescatter-nccl "$PYTHON" -m commbench run reducescatter --impl nccl --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 10-reducescatter-ring "$PYTHON" -m commbench run reducescatter --impl ring --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 11-reducescatter-mpi "$PYTHON" -m commbench run reducescatter --impl mpi --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 12-broadcast-nccl "$PYTHON" -m commbench run broadcast --impl nccl --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 13-broadcast-tree "$PYTHON" -m commbench run broadcast --impl tree --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
run_step 14-broadcast-mpi "$PYTHON" -m commbench run broadcast --impl mpi --backend cuda -b 64K -e 4M -f 4 -n 200 -w 20 -c 1 -d float32 --inplace both --out /scratch/results/perlmutter/golden/results.jsonl
skip_external 15-allreduce-nccl_tests-all_reduce_perf 'nccl-tests not configured: set COMMBENCH_NCCL_TESTS, --set nccl_tests=DIR or nccl_tests in the site file'
skip_external 16-allreduce-osu-osu_allreduce 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 17-allgather-nccl_tests-all_gather_perf 'nccl-tests not configured: set COMMBENCH_NCCL_TESTS, --set nccl_tests=DIR or nccl_tests in the site file'
skip_external 18-allgather-osu-osu_allgather 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 19-reducescatter-nccl_tests-reduce_scatter_perf 'nccl-tests not configured: set COMMBENCH_NCCL_TESTS, --set nccl_tests=DIR or nccl_tests in the site file'
skip_external 20-reducescatter-osu-osu_reduce_scatter 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
skip_external 21-broadcast-nccl_tests-broadcast_perf 'nccl-tests not configured: set COMMBENCH_NCCL_TESTS, --set nccl_tests=DIR or nccl_tests in the site file'
skip_external 22-broadcast-osu-osu_bcast 'osu not configured: set COMMBENCH_OSU, --set osu=DIR or osu in the site file'
