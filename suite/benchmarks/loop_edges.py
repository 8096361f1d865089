"""Where the latency loop's first and last timed calls stand against the others.

``python -m commbench.benchmarks.loop_edges [NP] [--launches N] [--after-us US]`` starts
NP local ranks (default 8 on this machine's cores: oversubscribed, as the emulated
cluster's ranks are) and prints, per loop, the first and the last timed call over the
median of the calls between them (each call the slowest rank's time), medians over every
loop it ran:

- ``bare``: an mpi4py loop of OSU's latency shape (a barrier, then the timed call: a
  recursive-doubling exchange of 256 B over all ranks, persistent requests), then
  ``--after-us`` of busy Python before the next barrier (what a harness does after its
  loop; 100 us by default);
- ``edges``: the same loop with one untimed call each side of the timed ones
  (:func:`commbench.harness.iterclock.latency_calls`);
- ``commbench run`` with ``--timing latency`` for ``recursive-doubling`` (the loop in
  Python) and ``mpi`` (the loop in C where it can be built: the row names the record's
  ``timed_loop``), 256 B and 4 KiB, from the raw samples it writes.

Under a launcher (``mpiexec -n 8 python -m commbench.benchmarks.loop_edges``) it prints the
bare loops' rows only.

Then, per launch, a skewed all-to-allv's finish-time call (one call after a barrier, each
rank's end: ``rank_finish_us``, figure 3) over its timed calls, the slowest rank's each:
the checked call's buffers are filled right after it.

A rank done early with a loop's last call runs what follows it without yielding its core
while the others still run theirs; a rank waiting in MPI yields. The ``bare`` row is that
cost; the harness's rows say whether its loops still pay it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CALLS, LOOPS, NBYTES = 10, 20, 256
HARNESS = ("recursive-doubling", "mpi")


def edge_ratios(per_call: np.ndarray) -> tuple[float, float, float]:
    """``(first / middle, last / middle, middle)`` of a loop's per-call times (the
    slowest rank's), middle the median of the calls between the first and the last."""
    t = np.asarray(per_call, dtype=np.float64)
    middle = float(np.median(t[1:-1]))
    return float(t[0] / middle), float(t[-1] / middle), middle


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def bare_loops(comm, edges: bool, after_us: float, loops: int) -> list[np.ndarray]:
    """Per loop, the slowest rank's time of each of :data:`CALLS` timed calls (on rank 0;
    the others get empty lists). Collective."""
    from mpi4py import MPI

    r, p = comm.rank, comm.size
    send = [np.zeros(NBYTES // 4, np.float32) for _ in range(p.bit_length() - 1)]
    recv = [np.zeros_like(b) for b in send]
    plans = [[comm.Send_init(send[k], r ^ (1 << k), 3), comm.Recv_init(recv[k], r ^ (1 << k), 3)]
             for k in range(len(send))]  # fmt: skip

    def call() -> None:
        for k, reqs in enumerate(plans):
            MPI.Prequest.Startall(reqs)
            MPI.Request.Waitall(reqs)
            np.add(send[k], recv[k], out=send[(k + 1) % len(send)])

    for _ in range(3):
        call()
    first, last = (1, CALLS + 1) if edges else (0, CALLS)
    out = []
    for _ in range(loops):
        times = np.empty(last + (1 if edges else 0))
        for i in range(times.size):
            comm.Barrier()
            t0 = time.perf_counter()
            call()
            times[i] = time.perf_counter() - t0
        _busy(after_us * 1e-6)
        every = comm.gather(times[first:last] * 1e6)
        if r == 0:
            out.append(np.max(every, axis=0))
        comm.Barrier()
    for reqs in plans:
        for req in reqs:
            req.Free()
    return out


def _commbench_run(np_: int, argv: list[str], out: Path, timeout: float) -> tuple[list, list]:
    """``commbench run ARGV --out OUT`` on ``np_`` local ranks: its records and raw rows."""
    from commbench.launch import find_mpiexec, local_env

    cmd = [find_mpiexec() or "mpiexec", "-n", str(np_), sys.executable, "-m", "commbench",
           "run", *argv, "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=local_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"commbench run failed: {proc.stderr.strip()[-400:]}")
    read = [[json.loads(x) for x in path.read_text().splitlines()]
            for path in (out, out.with_suffix(".raw.jsonl"))]  # fmt: skip
    return read[0], read[1]


def harness_loops(np_: int, launches: int, timeout: float) -> dict[tuple[str, str, int], list]:
    """Per (impl, its record's ``timed_loop``, size), the slowest rank's per-call times of
    each launch of ``commbench run allreduce --timing latency`` on ``np_`` local ranks (one
    rank a node)."""
    out: dict[tuple[str, str, int], list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(launches):
            for impl in HARNESS:
                argv = ["allreduce", "--impl", impl, "--gpus-per-node", "1", "-b", "256",
                        "-e", "4K", "-f", "16", "-n", str(CALLS), "-w", "5", "--timing",
                        "latency", "-c", "0"]  # fmt: skip
                recs, raw = _commbench_run(np_, argv, Path(tmp) / f"{impl}-{n}.jsonl", timeout)
                loop = {rec["size_bytes"]: rec["timed_loop"] for rec in recs}
                for row in raw:
                    slowest = np.max(np.asarray(row["samples_us"]), axis=0)
                    key = (impl, loop[row["size_bytes"]], row["size_bytes"])
                    out.setdefault(key, []).append(slowest)
    return out


def finish_ratios(np_: int, launches: int, timeout: float) -> dict[int, list[float]]:
    """Per size, each launch's slowest ``rank_finish_us`` (the finish-time call) over its
    slowest ``rank_time_us`` (the timed calls) for a skewed all-to-allv, checked (``-c
    1``: the checked call's buffers are filled right after the finish-time call)."""
    out: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(launches):
            argv = ["alltoallv", "--impl", "fanout", "--gpus-per-node", str(max(1, np_ // 2)),
                    "--workload", "zipf:0.99", "-b", "256K", "-e", "4M", "-f", "4", "-n",
                    str(CALLS), "-w", "2", "-c", "1", "--timing", "latency"]  # fmt: skip
            recs, _ = _commbench_run(np_, argv, Path(tmp) / f"a2a-{n}.jsonl", timeout)
            for rec in recs:
                ratio = max(rec["rank_finish_us"]) / max(rec["rank_time_us"])
                out.setdefault(rec["size_bytes"], []).append(ratio)
    return out


def bare_rows(after_us: float, plain: list, edges: list) -> list[tuple[str, list]]:
    """The bare loops' two rows for :func:`table`."""
    return [(f"bare mpi4py loop, then {after_us:g} us of work", plain),
            ("the same, one untimed call each side", edges)]  # fmt: skip


def table(rows: list[tuple[str, list]]) -> str:
    """One line per loop kind: medians over its loops of :func:`edge_ratios`."""
    lines = [f"  {'loop':54s} {'loops':>5s} {'first/mid':>9s} {'last/mid':>9s} {'mid us':>8s}"]
    for name, loops in rows:
        r = np.median(np.array([edge_ratios(t) for t in loops]), axis=0)
        lines.append(f"  {name:54s} {len(loops):5d} {r[0]:9.2f} {r[1]:9.2f} {r[2]:8.1f}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from commbench.launch import relaunch, under_launcher

    p = argparse.ArgumentParser(prog="python -m commbench.benchmarks.loop_edges")
    p.add_argument("np", nargs="?", type=int, default=8, help="ranks (a power of two)")
    p.add_argument("--launches", type=int, default=3, help="launches of each loop kind")
    p.add_argument("--after-us", type=float, default=100.0,
                   help="busy Python after the bare loop's last call (us)")  # fmt: skip
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.np < 2 or args.np & (args.np - 1) or args.launches < 1 or args.after_us < 0:
        p.error("NP must be a power of two of at least 2, --launches at least 1 and "
                "--after-us not negative")  # fmt: skip
    if under_launcher():
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        got: dict[bool, list] = {False: [], True: []}
        for _ in range(LOOPS // 2):  # the two kinds interleaved, a few loops at a time
            for edges in (False, True):
                got[edges] += bare_loops(comm, edges, args.after_us, 2)
        if comm.rank == 0 and args.worker_out:
            Path(args.worker_out).write_text(
                json.dumps({str(k): [t.tolist() for t in v] for k, v in got.items()})
            )
        elif comm.rank == 0:
            print(table(bare_rows(args.after_us, got[False], got[True])))
        return 0
    print(f"# {args.np} ranks on this machine, {CALLS} timed calls a loop, "
          f"{args.launches} launches; ratios: medians over the loops")  # fmt: skip
    bare: dict[str, list] = {"False": [], "True": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.launches):
            out = Path(tmp) / f"bare-{n}.json"
            rc = relaunch(args.np, "commbench.benchmarks.loop_edges",
                          [str(args.np), "--after-us", str(args.after_us), "--worker-out",
                           str(out)], timeout=600)  # fmt: skip
            if rc or not out.exists():
                print(f"loop_edges: the bare loops' launch failed (exit {rc})", file=sys.stderr)
                return 1
            for k, v in json.loads(out.read_text()).items():
                bare[k] += v
    try:
        harness = harness_loops(args.np, args.launches, timeout=600)
        finish = finish_ratios(args.np, args.launches, timeout=600)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"loop_edges: {e}", file=sys.stderr)
        return 1
    rows = bare_rows(args.after_us, bare["False"], bare["True"])
    for impl, loop, size in sorted(harness, key=lambda k: (HARNESS.index(k[0]), k[2])):
        rows.append((f"commbench run {impl}, {loop} loop, {size} B", harness[impl, loop, size]))
    print(table(rows))
    print("# the finish-time call (rank_finish_us) over the timed calls (rank_time_us), slowest "
          "rank, fanout on zipf:0.99, -c 1: per launch")  # fmt: skip
    for size, ratios in sorted(finish.items()):
        print(f"  {size:>8d} B  " + "  ".join(f"{r:.2f}" for r in ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
