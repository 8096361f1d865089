"""Fault-injection soak (``make soak``; not part of ``make test`` or ``make bench``).

``python -m commbench.benchmarks.soak calls [N]`` (it starts itself on 8 ranks, or runs
under the launcher that started it): N consecutive ``fast+sched``
all-to-allv and N ``nvrar`` all-reduce calls (default 10 000 each) on inputs that change
every call (a new traffic matrix, size and seed; a new count and data), each checked
against the closed-form answer; prints the wrong-value count and the resident memory
after the first tenth and at the end (flat: no growth with the call count).

``python -m commbench.benchmarks.soak inject [N]``: N (default 50) random faults - SIGKILL or
SIGSTOP of a random rank, a full disk, SIGINT to the launcher - each into a ``--resume``
of one sweep; after each, every results file must read back whole (a cut-off tail may
only be set aside, by the next run) and no completed point may be missing. Prints the
counts. The full-disk faults need root (a small tmpfs); without root they are skipped.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CALLS = 10_000
INJECTIONS = 50
RANKS = 4
#: ranks of the `calls` soak (8 emulated GPUs: 2 servers x 4)
CALL_RANKS = 8
SWEEP = ["allreduce", "--impl", "mpi", "-b", "4", "-e", "320", "-i", "4", "-n", "1", "-w", "0"]
SWEEP_POINTS = 80
WATCHDOG_S = 3
JOB_LIMIT_S = 60


# ---------------------------------------------------------------- calls (under MPI)


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def soak_calls(n: int) -> int:
    from commbench.harness import collectives
    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology
    from commbench.harness.workloads import generate
    from commbench.kernels.registry import lookup

    topo = Topology.create(gpus_per_node=4)
    t = create_transport("cpu", topo)
    fast = lookup("alltoallv", "fast+sched").factory(t, {})
    nvrar = lookup("allreduce", "nvrar").factory(t, {})
    laws = ("zipf:0.8", "random", "hotspot", "moe:8,2", "uniform")
    wrong = {"fast+sched": 0, "nvrar": 0}
    rss = []
    t0 = time.perf_counter()
    for i in range(n):
        rng = np.random.default_rng(i)  # every rank draws the same inputs
        size = int(rng.integers(1, 64)) * 256
        traffic = generate(laws[i % len(laws)], topo.size, size, seed=i)
        point = collectives.alltoallv_point(t, traffic, size, 1, laws[i % len(laws)])
        collectives.fill(t, point, rep=i)
        fast.setup(point.case)
        fast.run(point.case)
        wrong["fast+sched"] += collectives.count_wrong(t, point, rep=i)
        count = int(rng.integers(1, 4096))
        point = collectives.allreduce_point(t, count * 4, np.dtype(np.float32), "sum")
        collectives.fill(t, point, rep=i)
        nvrar.setup(point.case)
        nvrar.run(point.case)
        wrong["nvrar"] += collectives.count_wrong(t, point, rep=i)
        if (i + 1) % max(1, n // 10) == 0:
            rss.append(max(topo.world.allgather(resident_mib())))
    elapsed = time.perf_counter() - t0
    totals = {k: topo.world.allreduce(v) for k, v in wrong.items()}
    if topo.rank == 0:
        print(f"# soak calls: {n} fast+sched and {n} nvrar calls on {topo.size} ranks "
              f"({topo.nodes} emulated nodes x {topo.gpus_per_node}), inputs changing every call")  # fmt: skip
        print(f"  wrong values: fast+sched {totals['fast+sched']}, nvrar {totals['nvrar']}")
        print(f"  resident memory (max over ranks): {rss[0]:.1f} MiB after {n // 10} calls, "
              f"{rss[-1]:.1f} MiB after {n} ({rss[-1] - rss[0]:+.1f} MiB); every tenth: "
              + " ".join(f"{m:.0f}" for m in rss))  # fmt: skip
        print(f"  time: {elapsed:.1f} s ({elapsed / n * 1e3:.2f} ms per pair of calls)")
        sys.stdout.flush()
    if hasattr(nvrar, "close"):
        nvrar.close()
    t.close()
    return 1 if any(totals.values()) or rss[-1] - rss[0] > 64 else 0


# ---------------------------------------------------------------- injections (launcher side)


def soak_inject(n: int, seed: int = 0) -> int:
    from commbench.analysis.load import read_records
    from commbench.analysis.records import point_key
    from commbench.launch import find_mpiexec, is_open_mpi, local_env

    launcher = [find_mpiexec() or "mpiexec"]
    launcher += ["--oversubscribe"] if is_open_mpi(launcher[0]) else []
    env = local_env()

    rnd = random.Random(seed)
    root = os.geteuid() == 0
    kinds = ["kill", "stop", "sigint"] + (["enospc"] if root else [])
    counts = {
        k: 0
        for k in (
            *kinds,
            "missed",
            "ended",
            "hung",
            "named",
            "torn_set_aside",
            "lost",
            "invalid",
            "recorded",
        )
    }
    completed_sweeps = 0
    with tempfile.TemporaryDirectory(prefix="commbench-soak-") as tmp:
        disk = Path(tmp) / "disk"
        disk.mkdir()
        if root:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)],
                           check=True)  # fmt: skip
        try:
            out = disk / "r.jsonl"
            done: set[str] = set()
            trial = 0
            while sum(counts[k] for k in kinds) < n and trial < 4 * n:
                trial += 1
                kind = rnd.choice(kinds)
                filler = disk / "filler"
                if kind == "enospc":
                    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
                    filler.write_bytes(b"\0" * max(0, free - rnd.randint(1, 6) * 1024))
                cmd = [*launcher, "-n", str(RANKS), sys.executable, "-m",
                       "commbench", "run", *SWEEP, "--out", str(out), "--resume",
                       "--watchdog", str(WATCHDOG_S)]  # fmt: skip
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)  # fmt: skip
                time.sleep(rnd.uniform(0.5, 5.0))
                delivered, victims = _inject(kind, proc, rnd)
                counts[kind] += delivered  # a fault that came after the run ended is no fault
                counts["missed"] += not delivered
                try:
                    _, err = proc.communicate(timeout=JOB_LIMIT_S)
                    counts["ended"] += 1
                except subprocess.TimeoutExpired:
                    counts["hung"] += 1
                    os.killpg(proc.pid, signal.SIGKILL)
                    _, err = proc.communicate()
                for pid in victims:
                    _kill(pid, signal.SIGKILL)
                filler.unlink(missing_ok=True)
                counts["torn_set_aside"] += err.count("was moved to")
                caught = "stopped responding" in err or "Timeout" in err
                if kind == "stop" and caught:
                    counts["named"] += 1  # the watchdog (or the start-up/exit guard) caught it
                if (
                    kind == "stop" and victims and not caught
                ) or proc.returncode == -signal.SIGKILL:
                    tail = " | ".join(err.strip().splitlines()[-3:])
                    print(f"  trial {trial} ({kind}, exit {proc.returncode}): {tail[:300]}")
                try:
                    now = {point_key(r) for r in read_records(out)} if out.exists() else set()
                except ValueError as exc:
                    counts["invalid"] += 1
                    print(f"  trial {trial} ({kind}): {exc}")
                    continue
                counts["lost"] += len(done - now)
                counts["recorded"] += len(now - done)
                done = now
                if len(done) == SWEEP_POINTS:  # the sweep finished: start a new file
                    completed_sweeps += 1
                    for f in disk.glob("r.*"):
                        f.unlink()
                    done = set()
        finally:
            if root:
                subprocess.run(["umount", "-l", str(disk)], check=False)
    print(f"# soak inject: {sum(counts[k] for k in kinds)} faults into --resume'd sweeps ({RANKS} ranks, {SWEEP_POINTS} points each, "
          f"--watchdog {WATCHDOG_S})")  # fmt: skip
    print("  faults: " + ", ".join(f"{k} {counts[k]}" for k in kinds)
          + ("" if root else " (enospc skipped: needs root)")
          + f"; {counts['missed']} more came after the run had ended (not counted)")  # fmt: skip
    print(f"  jobs ended by themselves: {counts['ended']}, hung past {JOB_LIMIT_S} s: "
          f"{counts['hung']}; stopped ranks caught by the watchdog: {counts['named']} of "
          f"{counts['stop']}")  # fmt: skip
    print(f"  files unreadable: {counts['invalid']}, completed points lost: {counts['lost']}, "
          f"cut-off tails set aside: {counts['torn_set_aside']}")  # fmt: skip
    print(f"  points recorded between faults: {counts['recorded']}, sweeps completed: "
          f"{completed_sweeps}")  # fmt: skip
    return 1 if counts["hung"] or counts["invalid"] or counts["lost"] else 0


def _inject(kind: str, proc: subprocess.Popen, rnd: random.Random) -> tuple[bool, list[int]]:
    """Do the fault; returns whether the run was still there to take it, and the pids left
    stopped (to clean up). A full disk is set up before the run, so it always counts."""
    if kind == "enospc":
        return True, []
    if proc.poll() is not None:
        return False, []
    if kind == "sigint":
        return _kill(proc.pid, signal.SIGINT), []
    ranks = rank_pids(proc.pid)
    if not ranks:
        return False, []
    pid = rnd.choice(ranks)
    if not _kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP):
        return False, []
    return True, [pid] if kind == "stop" else []


def _kill(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def rank_pids(launcher: int) -> list[int]:
    """The Python processes started by the launcher ``launcher``."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,comm="], capture_output=True, text=True)
    children: dict[int, list[tuple[int, str]]] = {}
    for line in out.stdout.splitlines():
        pid, ppid, comm = line.split(None, 2)
        children.setdefault(int(ppid), []).append((int(pid), comm))
    found, todo = [], [launcher]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            todo.append(pid)
            if comm.startswith("python"):
                found.append(pid)
    return found


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("calls", "inject"):
        print("usage: python -m commbench.benchmarks.soak calls [N] | inject [N]", file=sys.stderr)
        return 2
    if argv[0] == "calls":
        from commbench.launch import relaunch, under_launcher

        if not under_launcher():
            return relaunch(CALL_RANKS, "commbench.benchmarks.soak", argv, timeout=24 * 3600)
        return soak_calls(int(argv[1]) if len(argv) > 1 else CALLS)
    return soak_inject(int(argv[1]) if len(argv) > 1 else INJECTIONS)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
