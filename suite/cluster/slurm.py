"""A multi-node Slurm on the emulated cluster: ``commbench cluster slurm start|stop|status``.

``slurmctld`` runs in node 0's namespaces (its management address), one ``slurmd`` in
each node's network and UTS namespaces (its own hostname and address, its own spool and
log directory), and a ``munged`` of its own serves them all through a socket in the
state dir (a path socket is reachable from every network namespace). Node names and
addresses come from the cluster's description. The client commands (``sbatch``,
``squeue``, ``scancel``, ``sinfo``) run inside node 0 with this ``slurm.conf``:
:func:`client_command` wraps them, so users type ``commbench`` commands, never nsenter.

Everything lives under ``STATE/slurm`` (``STATE``: the cluster's state dir); the
daemons are found again by their pid files, so start, stop and status are idempotent,
and ``commbench cluster down`` ends whatever is left inside the namespaces.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from commbench.cluster import netns
from commbench.cluster.plan import ClusterSpec, enter_command
from commbench.errors import UsageError

#: which emulated cluster ``--system local-cluster`` jobs go to (default: ``cb``)
PREFIX_ENV = "COMMBENCH_CLUSTER_PREFIX"
SLURM_DIR = "slurm"
MUNGE_KEY = Path("/etc/munge/munge.key")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")
#: CPUs each node advertises: ranks oversubscribe the machine's cores on purpose
NODE_CPUS = 16
CLIENT_TIMEOUT_S = 30
#: node states in which a node takes jobs
READY = ("idle", "mixed", "allocated")
LOG_LINES = 5


class SlurmError(UsageError):
    """The cluster's Slurm could not do what was asked; the message says which daemon."""


@dataclass(frozen=True)
class Daemon:
    """One daemon this module starts: where its pid file and log are."""

    program: str  # the process name (/proc/PID/comm)
    label: str  # what messages call it
    pid_file: Path
    log: Path


@dataclass(frozen=True)
class SlurmPaths:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld"

    def node_dir(self, hostname: str) -> Path:
        return self.root / "nodes" / hostname

    def munged(self) -> Daemon:
        d = self.munge_dir
        return Daemon("munged", "munged", d / "munged.pid", d / "munged.log")

    def slurmctld(self) -> Daemon:
        return Daemon(
            "slurmctld", "slurmctld", self.root / "slurmctld.pid", self.root / "slurmctld.log"
        )

    def slurmd(self, hostname: str) -> Daemon:
        d = self.node_dir(hostname)
        return Daemon("slurmd", f"slurmd on {hostname}", d / "slurmd.pid", d / "slurmd.log")


def cluster_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """The state dir of the cluster ``$COMMBENCH_CLUSTER_PREFIX`` (default ``cb``)."""
    prefix = environ.get(PREFIX_ENV) or netns.DEFAULT_PREFIX
    return Path(environ.get(netns.STATE_ENV) or netns.STATE_ROOT / prefix)


def paths_for(folder: Path) -> SlurmPaths:
    return SlurmPaths(folder / SLURM_DIR)


# ------------------------------------------------------------------ slurm.conf (pure)


def slurm_conf(spec: ClusterSpec, paths: SlurmPaths) -> str:
    """The whole ``slurm.conf``: controller on node 0, every node from the description;
    ``%n`` gives each slurmd its own spool, pid file and log."""
    nodes = spec.all_nodes()
    node_dir = paths.root / "nodes" / "%n"
    lines = [
        f"# written by commbench cluster slurm for the emulated cluster {spec.prefix}",
        f"ClusterName={spec.prefix}",
        f"SlurmctldHost={nodes[0].hostname}({nodes[0].mgmt_address})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={paths.munge_socket}",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        f"StateSaveLocation={paths.ctld_state}",
        f"SlurmctldPidFile={paths.slurmctld().pid_file}",
        f"SlurmctldLogFile={paths.slurmctld().log}",
        f"SlurmdSpoolDir={node_dir / 'spool'}",
        f"SlurmdPidFile={node_dir / 'slurmd.pid'}",
        f"SlurmdLogFile={node_dir / 'slurmd.log'}",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "MinJobAge=300",
        "KillWait=5",
        "Waittime=0",
    ]
    for n in nodes:
        lines.append(
            f"NodeName={n.hostname} NodeAddr={n.mgmt_address} CPUs={NODE_CPUS} Boards=1 "
            f"SocketsPerBoard=1 CoresPerSocket={NODE_CPUS} ThreadsPerCore=1 State=UNKNOWN"
        )
    names = ",".join(n.hostname for n in nodes)
    lines.append(
        f"PartitionName=cluster Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
    )
    return "\n".join(lines) + "\n"


def client_command(spec: ClusterSpec, folder: Path, argv: list[str]) -> list[str]:
    """``argv`` (a Slurm client) run inside node 0, where the controller answers."""
    conf = paths_for(folder).conf
    return [
        "nsenter", f"--net=/run/netns/{spec.node(0).netns}",
        "env", f"SLURM_CONF={conf}", *argv,
    ]  # fmt: skip


# ------------------------------------------------------------------ processes


def alive(daemon: Daemon) -> int | None:
    """The daemon's pid when its pid file names a live process of that program."""
    try:
        pid = int(daemon.pid_file.read_text().split()[0])
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    return pid if comm == daemon.program else None


def log_tail(daemon: Daemon, lines: int = LOG_LINES) -> str:
    try:
        text = daemon.log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"(no log at {daemon.log})"
    return " | ".join(text[-lines:]) or f"(empty log {daemon.log})"


def failed(daemon: Daemon, what: str) -> SlurmError:
    return SlurmError(f"{daemon.label} {what}; last lines of {daemon.log}: {log_tail(daemon)}")


def _spawn(daemon: Daemon, argv: list[str], env: dict[str, str] | None = None) -> None:
    """Start a daemon that forks into the background (its launcher exits at once) and
    wait for its pid file; a failure names the daemon, with its log's last lines."""
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise failed(daemon, "did not go to the background in 30 s") from None
    if done.returncode:
        why = (done.stderr or done.stdout).strip().splitlines()
        said = f": {why[-1]}" if why else ""
        raise failed(daemon, f"did not start (exit status {done.returncode}{said})")
    _wait_pid(daemon)


def _wait_pid(daemon: Daemon, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = alive(daemon)
        if pid:
            return pid
        time.sleep(0.1)
    raise failed(daemon, f"did not start (no live pid in {daemon.pid_file} after {timeout:g} s)")


def stop_daemon(daemon: Daemon, grace_s: float = 10) -> bool:
    """TERM, then KILL after ``grace_s``; True when it was running."""
    pid = alive(daemon)
    if pid is None:
        daemon.pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(daemon):
        os.kill(pid, signal.SIGKILL)
        while alive(daemon):
            time.sleep(0.05)
    daemon.pid_file.unlink(missing_ok=True)
    return True


# ------------------------------------------------------------------ start / stop / status


def preflight() -> None:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        raise SlurmError(f"missing {', '.join(missing)}: apt-get install slurm-wlm munge (Debian)")
    if os.geteuid() != 0:
        raise SlurmError("the cluster's Slurm needs root (slurmd runs as root): run as root")


def cluster_up(folder: Path) -> ClusterSpec:
    """The cluster's spec; one line when it is not up."""
    state = netns.load_state(folder)
    if state.get("status") != "up":
        raise UsageError(
            f"the emulated cluster in {folder} is not up: run `commbench cluster down`"
        )
    spec = netns.load_spec(folder)
    live = set(netns.namespaces_with_prefix(spec.prefix))
    gone = [ns for ns in spec.namespaces() if ns not in live]
    if gone:
        raise UsageError(
            f"namespaces {', '.join(gone)} of cluster {spec.prefix} are gone: "
            "run `commbench cluster down`, then `up` again"
        )
    return spec


def daemons(spec: ClusterSpec, paths: SlurmPaths) -> list[Daemon]:
    """In start order."""
    return [
        paths.munged(),
        paths.slurmctld(),
        *(paths.slurmd(n.hostname) for n in spec.all_nodes()),
    ]


def start(folder: Path, timeout: float = 60) -> str:
    """Start what is not running yet and wait until every node is idle; on failure stop
    everything and name the daemon that failed with its log's last lines."""
    preflight()
    spec = cluster_up(folder)
    paths = paths_for(folder)
    try:
        _start(spec, paths, timeout)
    except BaseException:
        stop(folder)
        raise
    return f"slurm on emulated cluster {spec.prefix}: {spec.nodes} nodes idle, partition 'cluster'"


def _start(spec: ClusterSpec, paths: SlurmPaths, timeout: float) -> None:
    for d in (
        paths.munge_dir,
        paths.ctld_state,
        *(paths.node_dir(n.hostname) for n in spec.all_nodes()),
    ):
        d.mkdir(parents=True, exist_ok=True)
    tmp = paths.conf.with_suffix(".tmp")
    tmp.write_text(slurm_conf(spec, paths))
    tmp.replace(paths.conf)
    _start_munged(paths)
    env = dict(os.environ, SLURM_CONF=str(paths.conf))
    node0 = spec.node(0)
    if not alive(paths.slurmctld()):
        _spawn(paths.slurmctld(), enter_command(node0, ["slurmctld", "-f", str(paths.conf)]), env)
    for node in spec.all_nodes():
        d = paths.slurmd(node.hostname)
        if not alive(d):
            argv = ["slurmd", "-f", str(paths.conf), "-N", node.hostname]
            _spawn(d, enter_command(node, argv), env)
    _wait_idle(spec, paths, timeout)


def _start_munged(paths: SlurmPaths) -> None:
    daemon = paths.munged()
    if alive(daemon):
        return
    if not MUNGE_KEY.is_file() or MUNGE_KEY.stat().st_size == 0:
        done = subprocess.run(["mungekey", "--create", f"--keyfile={MUNGE_KEY}"], timeout=30)
        if done.returncode:
            raise SlurmError(f"could not create {MUNGE_KEY} (mungekey: exit {done.returncode})")
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)
    shutil.chown(paths.munge_dir, "munge", "munge")
    paths.munge_dir.chmod(0o755)
    _spawn(daemon, [
        "runuser", "-u", "munge", "--", "munged", f"--socket={paths.munge_socket}",
        f"--pid-file={daemon.pid_file}", f"--log-file={daemon.log}",
        f"--seed-file={paths.munge_dir / 'munged.seed'}", f"--key-file={MUNGE_KEY}",
    ])  # fmt: skip


def node_states(spec: ClusterSpec, folder: Path) -> dict[str, str]:
    """hostname -> Slurm node state (``sinfo``); empty when the controller does not answer."""
    cmd = client_command(spec, folder, ["sinfo", "-h", "-N", "-o", "%N %T"])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {}
    pairs = (line.split() for line in done.stdout.splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def _wait_idle(spec: ClusterSpec, paths: SlurmPaths, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        for d in daemons(spec, paths):
            if not alive(d):
                raise failed(d, "died")
        states = node_states(spec, paths.root.parent)
        if len(states) == spec.nodes and all(s.rstrip("*") in READY for s in states.values()):
            return
        for host, state in states.items():  # left down by an earlier run: its slurmd is back
            if state.startswith(("down", "drain", "fail")):
                resume = ["scontrol", "update", f"NodeName={host}", "State=RESUME"]
                subprocess.run(
                    client_command(spec, paths.root.parent, resume),
                    capture_output=True, timeout=CLIENT_TIMEOUT_S,
                )  # fmt: skip
        time.sleep(0.5)
    for node in spec.all_nodes():
        state = states.get(node.hostname, "unknown")
        if state.rstrip("*") not in READY:
            raise failed(
                paths.slurmd(node.hostname), f"left {node.hostname} {state} after {timeout:g} s"
            )
    raise failed(paths.slurmctld(), f"did not answer sinfo in {timeout:g} s")


def stop(folder: Path) -> list[str]:
    """Stop every daemon this module started for the cluster (nodes first); idempotent."""
    paths = paths_for(folder)
    nodes = sorted(p.name for p in (paths.root / "nodes").glob("*") if p.is_dir())
    order = [*(paths.slurmd(h) for h in nodes), paths.slurmctld(), paths.munged()]
    return [d.label for d in order if stop_daemon(d)]


def remove(folder: Path) -> list[str]:
    """Stop the daemons and delete ``STATE/slurm`` (config, spool, logs), for ``down``."""
    stopped = stop(folder)
    shutil.rmtree(paths_for(folder).root, ignore_errors=True)
    return stopped


def check_running(folder: Path) -> ClusterSpec:
    """Refuse, in one line, unless the cluster is up and every daemon of its Slurm lives."""
    spec = cluster_up(folder)
    paths = paths_for(folder)
    if not paths.conf.is_file():
        raise SlurmError(
            f"no Slurm runs on the emulated cluster {spec.prefix}: start it with "
            f"`commbench cluster slurm start --prefix {spec.prefix}`"
        )
    for d in daemons(spec, paths):
        if not alive(d):
            raise failed(
                d,
                f"is not running (restart with `commbench cluster slurm start --prefix {spec.prefix}`)",
            )
    return spec


def status(folder: Path) -> tuple[bool, str]:
    """(all running, what ``commbench cluster slurm status`` prints)."""
    spec = cluster_up(folder)
    paths = paths_for(folder)
    lines, ok = [], True
    for d in daemons(spec, paths):
        pid = alive(d)
        ok = ok and pid is not None
        lines.append(f"{d.label}: " + (f"running (pid {pid})" if pid else f"not running ({d.log})"))
    if ok:
        for argv in (["sinfo", "-N"], ["squeue"]):
            done = subprocess.run(
                client_command(spec, folder, argv),
                capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
            )  # fmt: skip
            lines.append((done.stdout or done.stderr).rstrip())
    return ok, "\n".join(lines)
