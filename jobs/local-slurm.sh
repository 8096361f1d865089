#!/bin/bash
# A single-node Slurm on this machine, for development and CI: munged + slurmctld + slurmd
# from Debian's `slurm-wlm` and `munge` packages.
#
#   bash jobs/local-slurm.sh start    write slurm.conf, start the daemons, wait for an idle node
#   bash jobs/local-slurm.sh stop     stop the daemons this script started (by their pid files)
#   bash jobs/local-slurm.sh status   daemons, node state and the queue
#
# Needs root (slurmd must run as root). No cgroups: processes are tracked through /proc
# (proctrack/linuxproc) and tasks are not bound (task/none). The node advertises
# COMMBENCH_SLURM_CPUS CPUs (default 64) whatever the hardware has, so a job that asks
# for 8 or 16 tasks fits on a 2-core machine (CPUs oversubscribed on purpose).
#
# Settings (environment):
#   COMMBENCH_SLURM_CONF_DIR  where slurm.conf goes (default /etc/slurm, where sbatch looks;
#                             elsewhere, export SLURM_CONF=DIR/slurm.conf for the clients)
#   COMMBENCH_SLURM_STATE     state, spool, logs and pid files (default /var/spool/commbench-slurm)
#   COMMBENCH_SLURM_CPUS      CPUs the node advertises (default 64)
#   COMMBENCH_SLURM_TIMEOUT   seconds to wait for the node to become idle (default 60)
set -euo pipefail

CONF_DIR=${COMMBENCH_SLURM_CONF_DIR:-/etc/slurm}
STATE=${COMMBENCH_SLURM_STATE:-/var/spool/commbench-slurm}
CPUS=${COMMBENCH_SLURM_CPUS:-64}
TIMEOUT=${COMMBENCH_SLURM_TIMEOUT:-60}
CONF=$CONF_DIR/slurm.conf
MARKER="# written by commbench jobs/local-slurm.sh"
NODE=$(hostname -s)
MUNGE_RUN=/run/munge
MUNGE_PID=$STATE/munge/munged.pid # ours: stop leaves a munged it did not start alone
export SLURM_CONF=$CONF

die() {
    echo "local-slurm: $*" >&2
    exit 1
}

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd runs as root); try: sudo bash $0 $1"
}

need_packages() {
    local missing=()
    local prog
    for prog in munged slurmctld slurmd sinfo sbatch; do
        command -v "$prog" >/dev/null 2>&1 || missing+=("$prog")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        die "missing ${missing[*]}: install them with: apt-get update && apt-get install -y slurm-wlm munge"
    fi
}

# The pid in a pid file, if that process is alive and is the named program (a stale pid
# file from an earlier boot may name a reused pid).
alive_pid() {
    local name=$1 file=$2 pid comm
    [ -s "$file" ] || return 1
    pid=$(cat "$file")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$comm" = "$name" ] || return 1
    echo "$pid"
}

write_conf() {
    if [ -e "$CONF" ] && ! grep -qxF "$MARKER" "$CONF"; then
        die "$CONF exists and was not written by this script; move it away or set COMMBENCH_SLURM_CONF_DIR"
    fi
    mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/slurmd" "$STATE/log"
    cat >"$CONF.tmp" <<EOF
$MARKER
ClusterName=commbench
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=10
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    mv "$CONF.tmp" "$CONF"
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return # a munged already answers (ours or the system's)
    fi
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    mkdir -p "$MUNGE_RUN" /var/log/munge /var/lib/munge "$STATE/munge"
    chown munge:munge "$MUNGE_RUN" /var/log/munge /var/lib/munge "$STATE/munge"
    chmod 0755 "$MUNGE_RUN"
    runuser -u munge -- munged --pid-file="$MUNGE_PID"
    munge -n | unmunge >/dev/null || die "munged started but a credential did not round-trip"
}

node_state() {
    sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n 1
}

start() {
    need_root start
    need_packages
    write_conf
    start_munge
    if ! alive_pid slurmctld "$STATE/slurmctld.pid" >/dev/null; then
        slurmctld
    fi
    if ! alive_pid slurmd "$STATE/slurmd.pid" >/dev/null; then
        slurmd
    fi
    local waited=0 state=""
    while [ "$waited" -lt "$TIMEOUT" ]; do
        state=$(node_state || true)
        case "$state" in
            idle | mixed | allocated) break ;;
            down* | drain* | fail*)
                scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 1
        waited=$((waited + 1))
    done
    case "$state" in
        idle | mixed | allocated) ;;
        *)
            tail -n 20 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2 || true
            die "node $NODE is '${state:-unknown}' after ${TIMEOUT}s (logs above, in $STATE/log)"
            ;;
    esac
    echo "local-slurm: node $NODE $state with $CPUS CPUs, partition 'local' (SLURM_CONF=$CONF)"
}

stop_pid_file() {
    local name=$1 file=$2 pid i
    pid=$(alive_pid "$name" "$file") || return 0
    kill "$pid"
    for i in $(seq 1 20); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    echo "local-slurm: $name (pid $pid) did not stop in 10 s; sending KILL" >&2
    kill -9 "$pid" 2>/dev/null || true
    : "$i"
}

stop() {
    need_root stop
    stop_pid_file slurmd "$STATE/slurmd.pid"
    stop_pid_file slurmctld "$STATE/slurmctld.pid"
    stop_pid_file munged "$MUNGE_PID"
    echo "local-slurm: stopped"
}

status() {
    local name file pid rc=0
    for name in munged slurmctld slurmd; do
        case $name in
            munged) file=$MUNGE_PID ;;
            *) file=$STATE/$name.pid ;;
        esac
        if pid=$(alive_pid "$name" "$file"); then
            echo "$name: running (pid $pid)"
        else
            echo "$name: not running"
            rc=1
        fi
    done
    if [ "$rc" -eq 0 ]; then
        sinfo -N -n "$NODE" || rc=1
        squeue || rc=1
    fi
    return "$rc"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *)
        echo "usage: bash $0 start|stop|status" >&2
        exit 2
        ;;
esac
