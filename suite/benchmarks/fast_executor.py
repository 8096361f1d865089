"""Per-call host cost of ``fast+sched``: what one rank does before and while its bytes move,
next to the modelled transfer of the same call on the ``h200`` profile.

``python -m commbench.benchmarks.fast_executor`` (``make bench``; ``--quick`` stops at 320 GPUs,
``--trace PATH`` replays another routing trace). For 8x8, 16x8, 40x8 and 128x8 GPUs, 16 MiB
per GPU, and three traffic laws - ``zipf:0.8``, the real Megatron-LM MoE trace (consecutive
32-rank iterations tiled to the size) and the expert-skewed MoE law ``moe:P,2`` - every call
gets a new matrix (the MoE case), and the table gives median and p99 over calls of:

- ``synth``: :func:`commbench.kernels.fast.schedule` (balancing, server matrix, stages, tail);
- ``plan``: rank 0's plan (:meth:`Schedule.plan`);
- ``bind``: :meth:`PlanExecutor.bind` as ``fast+sched`` calls it (``once=True``);
- ``host``: what runs before the first byte can move, as ``fast+sched`` runs it - a
  :class:`commbench.kernels.fast.Scheduler` (options checked once) making the schedule,
  rank 0's plan and its posting order in one call of the core, then the bind (which
  takes that order as is) - measured in the same loop, alternating with the three phases
  above (which it is less than the sum of);
- ``run``: the executor's own host work during the call (reading each step's message
  offsets while the step before it is in flight, cutting its copies' slices, and the
  loop), on a transport that moves nothing - the posts and waits themselves are the
  transport's (``start_ranges``: a message from its buffer offset), not counted;
- ``gather``: all-gathering the P x P int64 matrix, modelled at P ranks on ``h200``
  (recursive doubling: log2 P rounds of nic_us plus the rows at NIC bandwidth); the MPI
  measurement of the same bytes on 8 ranks of this machine is a table of its own;
- ``xfer``: the modelled time of the call's FAST transfer (``commbench.kernels.model.alltoallv.fast``
  on ``h200``, the first call's matrix), and ``host/xfer`` = (gather + host) / xfer;
- ``ahead``: what is left before the first byte when the caller knows each matrix one call
  early (an MoE layer, once it has routed) and makes its schedule and plan during the
  previous call's transfer (:func:`commbench.kernels.fast.schedule_ahead`; the transfer is a sleep of
  ``xfer``): waiting for that schedule, then the bind.

The table is printed twice: with the scheduler's defaults (what ``fast+sched`` runs
without ``--param``) and with ``h200``'s stage cost (``stage_cost_bytes``, what ``commbench
simulate --no-tune`` runs). ``host`` also shows the fastest call: on a loaded machine the
median is mostly other processes' time slices.

Then: the stage-count/quality trade-off (other scheduler options: host time next to the
modelled transfer), how far consecutive trace matrices move (what incremental repair
would start from), and synthesis on 1 vs 2 threads (two schedules at once, and one
hidden behind a transfer with :func:`commbench.kernels.fast.schedule_ahead`), and one schedule on
1 vs 2 threads (``threads=2``) with what 8 would give. Every number is
measured in this run; on a shared machine they are inflated and noisy (the load is
printed).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from commbench.harness.workloads import MEGATRON_TRACE

SHAPES = ((8, 8), (16, 8), (40, 8), (128, 8))  # servers x GPUs per server
SIZE = 16 << 20
UNIT = 2
TRACE = MEGATRON_TRACE
TRACE_RANKS = 32
TRACE_MATRICES = 64  # the first 64 iterations of the 600: enough distinct traffic to tile
TARGETS_US = {64: 40.0, 320: 400.0, 1024: 5000.0}  # issue 18: schedule + plan + bind, medians
ALLGATHER_ROUNDS = 7


def _calls(p: int) -> int:
    return 200 if p <= 64 else 100 if p <= 128 else 40 if p <= 320 else 8


def _ahead_calls(p: int) -> int:
    """Calls of the made-ahead loop (each sleeps a modelled transfer)."""
    return 100 if p <= 128 else 40 if p <= 320 else 8


def _pool(p: int) -> int:
    """Distinct matrices per law (cycled over the calls)."""
    return 16 if p <= 320 else 4


# ---------------------------------------------------------------- traffic


def load_trace(path: Path) -> np.ndarray:
    """The first ``TRACE_MATRICES`` token matrices of a 4x8 ``trace:`` file, ``count x 32 x 32``."""
    from commbench.harness.workloads import load_trace as read

    return read(str(path), TRACE_RANKS)[:TRACE_MATRICES]


def tiled_trace(mats: np.ndarray, p: int, call: int) -> np.ndarray:
    """Call ``call`` of the trace tiled to ``p`` ranks: block (i, j) of the (p/32)^2 blocks
    is iteration ``call + i * blocks + j`` (mod the count), scaled to SIZE per GPU."""
    from commbench.harness.workloads import apportion

    blocks = p // TRACE_RANKS
    idx = (call + np.arange(blocks * blocks)) % len(mats)
    tokens = mats[idx].reshape(blocks, blocks, TRACE_RANKS, TRACE_RANKS)
    tokens = tokens.transpose(0, 2, 1, 3).reshape(p, p)
    return apportion(tokens.astype(np.float64), p * SIZE // UNIT) * UNIT


def matrices(law: str, p: int, mats: np.ndarray) -> list[np.ndarray]:
    from commbench.harness.workloads import generate

    if law == "megatron":
        return [tiled_trace(mats, p, c) for c in range(_pool(p))]
    spec = f"moe:{p},2" if law == "moe" else law
    return [generate(f"{spec}@{c + 1}", p, SIZE, unit=UNIT) for c in range(_pool(p))]


# ---------------------------------------------------------------- measuring


class _NullTransport:
    """Moves nothing: what is left of ``PlanExecutor.run`` is its own host work."""

    class _Done:
        def wait(self) -> None:
            pass

    def __init__(self, p: int, g: int) -> None:
        self.topo = SimpleNamespace(rank=0, size=p, gpus_per_node=g, node=0, local=0)

    def empty(self, n: int, dtype) -> np.ndarray:
        return np.empty(n, dtype)

    def start(self, sends, recvs, group: str = "world") -> _NullTransport._Done:
        return self._Done()

    def start_ranges(self, bufs, sends, recvs, group: str = "world") -> _NullTransport._Done:
        return self._Done()

    def copy(self, dst, src) -> None:
        pass


def per_call(mats: list[np.ndarray], g: int, calls: int, **options) -> dict:
    """Per-phase samples (µs) of ``calls`` calls cycling over ``mats``: each call once
    phase by phase and once as fast+sched runs it (``host``; then ``run``), on another
    of the matrices (one just scheduled would find its data in cache)."""
    from commbench.kernels.fast import Scheduler, schedule
    from commbench.kernels.fast.executor import PlanExecutor

    p = mats[0].shape[0]
    ex = PlanExecutor(_NullTransport(p, g))
    bufs = [(np.empty(int(d[0].sum()), np.uint8), np.empty(int(d[:, 0].sum()), np.uint8))
            for d in mats]  # fmt: skip
    scheduler = Scheduler(g, unit=UNIT, **options)
    out: dict = {k: [] for k in ("synth", "plan", "bind", "host", "run")}
    clock = time.perf_counter
    for c in range(calls):
        d = mats[c % len(mats)]
        send, recv = bufs[c % len(mats)]
        t0 = clock()
        sched = schedule(d, g, unit=UNIT, **options)
        t1 = clock()
        plan = sched.plan(0)
        t2 = clock()
        ex.bind(plan, send, recv, once=True)
        t3 = clock()
        ex.run()
        other = (c + len(mats) // 2) % len(mats)  # not the matrix just scheduled: cold
        d2, (send2, recv2) = mats[other], bufs[other]
        t4 = clock()
        ex.bind(scheduler(d2, 0, ex.posting).plan(0), send2, recv2, once=True)
        t5 = clock()
        ex.run()
        t6 = clock()
        for key, dt in (("synth", t1 - t0), ("plan", t2 - t1), ("bind", t3 - t2),
                        ("host", t5 - t4), ("run", t6 - t5)):  # fmt: skip
            out[key].append(dt * 1e6)
    out["stages"] = sched.nstages
    out["ops"] = len(plan.ops)
    return out


def ahead_calls(mats: list[np.ndarray], g: int, calls: int, xfer_us: float, **options) -> list:
    """Per call (µs): waiting for the schedule made during the previous call's transfer,
    plus the bind - the host work left before the first byte when each matrix is known
    one call early. The transfer is a sleep of ``xfer_us`` (this thread waits, as one
    waiting on its NICs does), after the run's own host work."""
    from commbench.kernels.fast import schedule_ahead
    from commbench.kernels.fast.executor import PlanExecutor

    p = mats[0].shape[0]
    ex = PlanExecutor(_NullTransport(p, g))
    bufs = [(np.empty(int(d[0].sum()), np.uint8), np.empty(int(d[:, 0].sum()), np.uint8))
            for d in mats]  # fmt: skip
    clock = time.perf_counter
    made = schedule_ahead(mats[0], g, rank=0, unit=UNIT, **options)
    out = []
    for c in range(calls):
        send, recv = bufs[c % len(mats)]
        t0 = clock()
        sched = made.result()
        ex.bind(sched.plan(0), send, recv, once=True)
        out.append((clock() - t0) * 1e6)
        made = schedule_ahead(mats[(c + 1) % len(mats)], g, rank=0, unit=UNIT, **options)
        t1 = clock()
        ex.run()
        time.sleep(max(0.0, xfer_us / 1e6 - (clock() - t1)))
    made.result()
    return out


def modelled_transfer_us(d: np.ndarray, g: int, fabric, **options) -> float:
    from commbench.kernels.fast import schedule
    from commbench.kernels.model import alltoallv as a2a

    sched = schedule(d, g, unit=UNIT, **options)
    return a2a.fast(d, sched.transfers(), fabric).time_us


def allgather_model_us(p: int, fabric) -> float:
    """All-gather of the P x P int64 matrix (each rank its row): recursive doubling,
    round k moves 2^k rows of 8P bytes per NIC, each round pays the NIC latency."""
    rounds = max(1, math.ceil(math.log2(p)))
    rows = p - 1
    return rounds * fabric.nic_us + rows * 8 * p / (fabric.nic_GBps * 1e3)


def allgather_worker(out: str) -> int:
    """Under mpiexec: MPI_Allgather of each shape's matrix bytes on these ranks; rank 0
    writes ``P bytes median_us`` lines to ``out``."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    lines = []
    for servers, g in SHAPES:
        p = servers * g
        share = -(-p * p // n)  # int64 entries each rank contributes
        send = np.full(share, comm.Get_rank(), np.int64)
        recv = np.empty(share * n, np.int64)
        samples = []
        for _ in range(ALLGATHER_ROUNDS):
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(20):
                comm.Allgather(send, recv)
            samples.append(comm.allreduce((MPI.Wtime() - t0) / 20, op=MPI.MAX))
        lines.append(f"{p} {8 * p * p} {np.median(samples) * 1e6:.1f}\n")
    if comm.Get_rank() == 0:
        Path(out).write_text("".join(lines))
    return 0


def measured_allgather(np_: int = 8) -> dict[int, float]:
    """{P: µs} from :func:`allgather_worker` on ``np_`` ranks ({} if MPI did not run)."""
    import tempfile

    from commbench.launch import relaunch

    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # 8 ranks on few cores
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "allgather.txt"
        argv = ["--allgather-worker", str(out)]
        rc = relaunch(np_, "commbench.benchmarks.fast_executor", argv, 300)
        text = out.read_text() if rc == 0 and out.exists() else ""
    return {int(a): float(c) for a, _, c in (line.split() for line in text.splitlines())}


def _stats(samples: list[float], fastest: bool = False) -> str:
    """``median / p99`` (and ``/ min`` with ``fastest``) of ``samples``."""
    out = f"{np.median(samples):.0f} / {np.percentile(samples, 99):.0f}"
    return out + f" / {np.min(samples):.0f}" if fastest else out


def _table(title: str, *columns: str) -> None:
    """A section title and a markdown table's header."""
    print(f"\n## {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def _us(x: float) -> str:
    return f"{x / 1e3:.2f} ms" if x >= 1e3 else f"{x:.0f} µs"


# ---------------------------------------------------------------- sections


def main_table(shapes, laws, mats_trace, fabric, label: str, **options) -> dict:
    _table(f"Per call, {label} (rank 0; median / p99 over calls, µs; gather and xfer "
           "modelled on h200)",
           "GPUs", "law", "stages", "ops", "synth", "plan", "bind",
           "host (min)", "run", "gather", "xfer", "host/xfer",
           "(gather+host)/xfer", "ahead: wait + bind")  # fmt: skip
    hosts: dict = {}
    for servers, g in shapes:
        p = servers * g
        for law in laws:
            mats = matrices(law, p, mats_trace)
            m = per_call(mats, g, _calls(p), **options)
            xfer = modelled_transfer_us(mats[0], g, fabric, **options)
            gather = allgather_model_us(p, fabric)
            ahead = ahead_calls(mats, g, _ahead_calls(p), xfer, **options)
            host = float(np.median(m["host"]))
            hosts[(p, law)] = m["host"]
            hosts[(p, law, "ahead")] = ahead
            print(f"| {p} ({servers}x{g}) | {law} | {m['stages']} | {m['ops']} | "
                  f"{_stats(m['synth'])} | {_stats(m['plan'])} | {_stats(m['bind'])} | "
                  f"{_stats(m['host'], True)} | {_stats(m['run'])} | {gather:.0f} | {xfer:.0f} | "
                  f"{host / xfer:.2f} | {(gather + host) / xfer:.2f} | {_stats(ahead)} |")  # fmt: skip
    print()
    return hosts


def targets(hosts: dict, label: str) -> None:
    print(f"Targets (issue 18: host = schedule + plan + bind, median, zipf:0.8), {label}:\n")
    for p, goal in TARGETS_US.items():
        if (p, "zipf:0.8") in hosts:
            samples = hosts[(p, "zipf:0.8")]
            got = float(np.median(samples))
            ahead = float(np.median(hosts[(p, "zipf:0.8", "ahead")]))
            print(
                f"- {p} GPUs: {_us(got)} <= {_us(goal)}: {'met' if got <= goal else 'NOT met'} "
                f"(fastest call {_us(min(samples))}: what an idle core is nearer to); made "
                f"ahead, {_us(ahead)} left before the first byte: "
                f"{'met' if ahead <= goal else 'NOT met'}"
            )
    print()


def tradeoff_table(shapes, fabric) -> None:
    """Other scheduler options: host time against the modelled transfer (zipf:0.8)."""
    variants = {
        "default (bottleneck, <= 2S + tail)": {},
        "threshold": {"strategy": "threshold"},
        "bottleneck, <= S + tail": "S",
        "bvn (plain), <= 2S + tail": {"strategy": "bvn"},
        "+ stage cost (h200)": {"stage_cost_bytes": fabric.stage_cost_bytes},
    }
    _table("Stage count / quality trade-off (zipf:0.8; host median µs, modelled xfer µs)",
           "GPUs", "options", "stages", "sched/lb", "tail share", "host", "xfer",
           "host + xfer")  # fmt: skip
    from commbench.kernels.fast import schedule

    for servers, g in shapes:
        p = servers * g
        mats = matrices("zipf:0.8", p, np.zeros((1, 1, 1), np.int64))
        for name, opts in variants.items():
            opts = {"max_stages": servers} if opts == "S" else opts
            m = per_call(mats, g, max(4, _calls(p) // 4), **opts)
            xfer = modelled_transfer_us(mats[0], g, fabric, **opts)
            sched = schedule(mats[0], g, unit=UNIT, **opts)
            host = float(np.median(m["host"]))
            print(f"| {p} | {name} | {m['stages']} | "
                  f"{sched.scheduled_bytes / sched.lower_bound:.4f} | "
                  f"{sched.tail_fraction * 100:.1f} % | {host:.0f} | {xfer:.0f} | "
                  f"{host + xfer:.0f} |")  # fmt: skip


def reuse_previous_stages(sched_prev, sched_next) -> float:
    """Share of the next call's T that the previous call's stages (same permutations, in
    order, each as heavy as the next matrix allows) would carry."""
    from commbench.kernels.fast import server_matrix

    m, line = server_matrix(sched_next.traffic, sched_next.gpus_per_node, sched_next.unit)
    rest = m.copy()
    rows = np.arange(rest.shape[0])
    carried = 0
    for perm in sched_prev.perms:
        w = int(rest[rows, perm].min())
        rest[rows, perm] -= w
        carried += w
    return carried / line if line else 0.0


def movement_table(shapes, mats_trace) -> None:
    """How much consecutive Megatron matrices move, and what the previous stages carry."""
    from commbench.kernels.fast import schedule

    _table("Consecutive trace calls: how much the server matrix moves", "GPUs",
           "median L1 change of the server matrix", "previous call's stages carry",
           "a fresh schedule's stages carry")  # fmt: skip
    for servers, g in shapes:
        p = servers * g
        mats = [tiled_trace(mats_trace, p, c) for c in range(min(9, _pool(p) + 1))]
        scheds = [schedule(d, g, unit=UNIT) for d in mats]
        moved, reused, fresh = [], [], []
        for a, b in zip(scheds, scheds[1:], strict=False):
            sa = a.traffic.reshape(servers, g, servers, g).sum(axis=(1, 3))
            sb = b.traffic.reshape(servers, g, servers, g).sum(axis=(1, 3))
            np.fill_diagonal(sa, 0)
            np.fill_diagonal(sb, 0)
            moved.append(np.abs(sb - sa).sum() / max(1, sa.sum()))
            reused.append(reuse_previous_stages(a, b))
            fresh.append(b.stage_bytes / b.line_sum)
        print(f"| {p} | {np.median(moved) * 100:.1f} % | {np.median(reused) * 100:.1f} % of T "
              f"| {np.median(fresh) * 100:.1f} % of T |")  # fmt: skip


def threads_table(shapes, fabric) -> None:
    """1 vs 2 threads: two schedules (dispatch D, combine D^T) one after the other or at
    once; and one schedule made ahead while the caller waits out a transfer."""
    from commbench.kernels.fast import schedule, schedule_ahead

    _table("Threads (zipf:0.8; median µs of schedule + rank 0's plan)", "GPUs",
           "1 schedule", "2 in a row (1 thread)", "2 at once (2 threads)", "speed-up",
           "xfer (model)", "exposed when made ahead during xfer")  # fmt: skip
    for servers, g in shapes:
        p = servers * g
        d = matrices("zipf:0.8", p, np.zeros((1, 1, 1), np.int64))[0]
        dt = np.ascontiguousarray(d.T)
        n = max(4, _calls(p) // 8)

        def one(d=d, g=g):
            schedule(d, g, unit=UNIT).plan(0)

        def two_serial(d=d, dt=dt, g=g):
            schedule(d, g, unit=UNIT).plan(0)
            schedule(dt, g, unit=UNIT).plan(0)

        def two_parallel(d=d, dt=dt, g=g):
            other = schedule_ahead(dt, g, rank=0, unit=UNIT)
            schedule(d, g, unit=UNIT).plan(0)
            other.result()

        xfer = modelled_transfer_us(d, g, fabric)

        def ahead(d=d, g=g, xfer=xfer):  # what the caller still waits for after the transfer
            fut = schedule_ahead(d, g, rank=0, unit=UNIT)
            time.sleep(xfer / 1e6)  # the transfer: this thread waits, the GIL is free
            t0 = time.perf_counter()
            fut.result()
            return (time.perf_counter() - t0) * 1e6

        samples: dict = {"one": [], "serial": [], "parallel": [], "exposed": []}
        for _ in range(n):  # interleaved
            for key, fn in (("one", one), ("serial", two_serial), ("parallel", two_parallel)):
                t0 = time.perf_counter()
                fn()
                samples[key].append((time.perf_counter() - t0) * 1e6)
            samples["exposed"].append(ahead())
        med = {k: float(np.median(v)) for k, v in samples.items()}
        print(f"| {p} | {med['one']:.0f} | {med['serial']:.0f} | {med['parallel']:.0f} | "
              f"{med['serial'] / med['parallel']:.2f}x | {xfer:.0f} | {med['exposed']:.0f} |")  # fmt: skip


def cores_table(shapes, fabric) -> None:
    """One schedule on 1 and 2 threads (``threads=2``: the O(P^2) matrix pass in two row
    blocks), and what 8 threads - a 64-core node's share per GPU - would give: the rest
    of the call, the pass over 8, and the handoff cost the 2-thread run showed."""
    from commbench.kernels.fast import _core
    from commbench.kernels.fast.scheduler import PARALLEL_MIN_RANKS

    _table(f"Cores (zipf:0.8; median µs of host = schedule + plan + bind; threads > 1 from "
           f"{PARALLEL_MIN_RANKS} GPUs on)", "GPUs", "options", "1 thread", "matrix pass",
           "2 threads", "speed-up", "8 threads (projected)")  # fmt: skip
    for servers, g in shapes:
        p = servers * g
        mats = matrices("zipf:0.8", p, np.zeros((1, 1, 1), np.int64))
        for name, opts in (("defaults", {}), ("h200 stage cost",
                                              {"stage_cost_bytes": fabric.stage_cost_bytes})):  # fmt: skip
            n = max(4, _calls(p) // 4)
            one = per_call(mats, g, n, **opts)["host"]
            two = per_call(mats, g, n, threads=2, **opts)["host"]
            pass_us = []
            for c in range(n):
                t0 = time.perf_counter()
                _core.regions(mats[c % len(mats)], g, UNIT, 1)
                pass_us.append((time.perf_counter() - t0) * 1e6)
            h1, h2, ps = (float(np.median(x)) for x in (one, two, pass_us))
            if p >= PARALLEL_MIN_RANKS:
                handoff = max(0.0, h2 - (h1 - ps / 2))
                proj = f"{h1 - ps + ps / 8 + handoff:.0f}"
            else:
                proj = f"{h1:.0f} (one thread below {PARALLEL_MIN_RANKS} GPUs)"
            print(f"| {p} | {name} | {h1:.0f} | {ps:.0f} ({ps / h1 * 100:.0f} %) | {h2:.0f} | "
                  f"{h1 / h2:.2f}x | {proj} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="stop at 320 GPUs")
    ap.add_argument("--trace", type=Path, default=TRACE, help="a 4x8 routing trace file")
    ap.add_argument("--allgather-worker", metavar="OUT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.allgather_worker:
        return allgather_worker(args.allgather_worker)
    from commbench.kernels.fast import warmup
    from commbench.model.simulate import fabric_from_profile

    load = warmup()
    fabric = fabric_from_profile("h200")
    shapes = [s for s in SHAPES if not (args.quick and s[0] * s[1] > 320)]
    mats_trace = load_trace(args.trace)
    print("# fast+sched per-call host cost (16 MiB per GPU; every call a new matrix)")
    print(
        f"# numba load: {load:.2f} s (once per process, not in any figure); "
        f"load average now: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n"
    )
    laws = ("zipf:0.8", "megatron", "moe")
    for label, options in (
        ("scheduler defaults", {}),
        ("h200's stage cost (as `commbench simulate --no-tune`)",
         {"stage_cost_bytes": fabric.stage_cost_bytes}),
    ):  # fmt: skip
        targets(main_table(shapes, laws, mats_trace, fabric, label, **options), label)
    ag = measured_allgather()
    _table("Matrix all-gather (MPI_Allgather of the P x P int64 matrix's bytes)", "GPUs",
           "bytes", "measured, 8 ranks on this machine", "modelled, P ranks on h200")  # fmt: skip
    for servers, g in shapes:
        p = servers * g
        meas = f"{ag[p]:.0f} µs" if p in ag else "(MPI did not run)"
        print(f"| {p} | {8 * p * p} | {meas} | {allgather_model_us(p, fabric):.0f} µs |")
    tradeoff_table(shapes, fabric)
    movement_table(shapes, mats_trace)
    threads_table(shapes, fabric)
    cores_table(shapes, fabric)
    print(f"\n# load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
