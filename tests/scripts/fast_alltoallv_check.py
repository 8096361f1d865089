"""Test-only: the FAST executors and all-to-allv baselines against MPI_Alltoallv, many
cases in one launch (8 ranks start slowly on a small machine).

    mpiexec -n 8 python tests/scripts/fast_alltoallv_check.py OUT.json TMPDIR PART... [--calls N]

Parts, each summarised by rank 0 in OUT.json:

* ``parity``: for G in {1, 2, 4, 8} (whatever divides the rank count), every workload
  and the corner cases (all-zero, one hot pair, sizes divisible by nothing, ...), the
  four implementations (and FAST's scheduler / grouping options where 1 < G < P): the
  receive buffer equals ``MPI_Alltoallv``'s, byte for byte, on two consecutive calls;
* ``churn``: CALLS consecutive ``fast+sched`` calls (and CALLS // 5 ``fast`` setups),
  a new matrix each time (the real MoE trace folded to the rank count, cycling), each
  checked, with the resident memory before and after;
* ``refuse``: mismatched plans and disagreeing ranks raise ``ValueError`` on every rank
  with nothing sent, and the ranks can communicate normally afterwards.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from commbench.harness.backends import create_transport
from commbench.harness.collectives import alltoallv_expected, alltoallv_send_data
from commbench.harness.topology import Topology
from commbench.harness.workloads import MEGATRON_TRACE as TRACE
from commbench.harness.workloads import generate, load_trace, write_matrix
from commbench.kernels.cases import AlltoallvCase
from commbench.kernels.fast import schedule, warmup
from commbench.kernels.fast.executor import PlanExecutor, load
from commbench.kernels.fast.plan import RECV_BUF, RankPlan
from commbench.kernels.registry import lookup

CORE = [("fast", {}), ("fast+sched", {}), ("balance-only", {}), ("spreadout", {})]
#: Scheduler and grouping options matter where there are several servers and GPUs each.
OPTIONS = [
    ("fast", {"groups": "split"}),
    ("fast", {"strategy": "bvn", "max_stages": "none"}),
    ("fast", {"strategy": "threshold", "quantum": "auto"}),
    ("fast", {"max_stages": 1}),
    ("fast", {"balance": "prologue"}),
    ("fast", {"max_stage_bytes": 1000}),
]


class SpyTransport:
    """The cpu transport, counting what was posted (to prove nothing was sent)."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.posted = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def start(self, sends, recvs, group="world"):
        self.posted += len(sends) + len(recvs)
        return self._inner.start(sends, recvs, group)

    def start_ranges(self, bufs, sends, recvs, group="world"):
        self.posted += len(sends[0]) + len(recvs[0])
        return self._inner.start_ranges(bufs, sends, recvs, group)

    def exchange(self, sends, recvs, group="world"):
        self.start(sends, recvs, group).wait()

    def plan(self, sends, recvs, group="world"):
        from commbench.kernels.transport import Replay

        return Replay(self, sends, recvs, group)  # each start counted, not persistent


def fold_trace(path: Path, nranks: int, out: Path, count: int = 64) -> Path | None:
    """The 32-rank trace summed over blocks of ranks down to ``nranks`` (a real MoE
    routing pattern at a rank count this machine can run)."""
    if 32 % nranks:
        return None
    mats = load_trace(str(path), 32)[:count]
    f = 32 // nranks
    folded = mats.reshape(-1, nranks, f, nranks, f).sum(axis=(2, 4))
    np.savetxt(out, folded.reshape(-1), fmt="%d")
    return out


def matrices(p: int, tmp: Path, trace: Path | None) -> list[tuple[str, np.ndarray, int]]:
    """``(name, traffic, unit)`` for every case: workloads and corner cases."""
    rng = np.random.default_rng(7)
    out = [
        ("uniform", generate("uniform", p, 4096, unit=4), 4),
        ("random/9973", generate("random@2", p, 9973), 1),
        ("zipf:0.9", generate("zipf:0.9@3", p, 65536, unit=4), 4),
        ("zipf:0.1/3001", generate("zipf:0.1@4", p, 3001), 1),
        ("hotspot", generate("hotspot@5", p, 20000, unit=2), 2),
        ("perm-sum", generate("perm-sum@6", p, 12345), 1),
        ("moe:16,2", generate("moe:16,2@8", p, 30000, unit=2), 2),
    ]
    out.append(("file", generate(f"file:{tmp / 'odd.txt'}", p, 0), 1))
    if trace is not None:
        for i in (0, 17):
            out.append((f"trace#{i}", generate(f"trace:{trace},ranks={p}", p, 7001, index=i), 1))
    zero = np.zeros((p, p), dtype=np.int64)
    hot = zero.copy()
    hot[0, p - 1] = 100003
    hot_intra = zero.copy()
    hot_intra[1, 0] = 777
    diag = np.diag(rng.integers(1, 999, p))
    row = zero.copy()
    row[3] = [7919, 0, 1, 13, 0, 101, 3, 29][:p]
    out += [("all-zero", zero, 1), ("hot-pair", hot, 1), ("hot-pair-self-node", hot_intra, 1),
            ("diagonal", diag, 1), ("one-sender", row, 1), ("one-receiver", row.T.copy(), 1),
            ("primes", rng.choice([1, 3, 7, 11, 13, 9973], (p, p)) * rng.integers(1, 50, (p, p)), 1)]  # fmt: skip
    return out


def make_case(traffic: np.ndarray, rank: int, unit: int, seed: int) -> AlltoallvCase:
    rng = np.random.default_rng([seed, rank])
    send = rng.integers(0, 256, int(traffic[rank].sum()), dtype=np.uint8)
    recv = np.full(int(traffic[:, rank].sum()), 0xFF, dtype=np.uint8)
    return AlltoallvCase(traffic=traffic, send=send, recv=recv, rank=rank, unit=unit)


def reference(comm, case: AlltoallvCase) -> np.ndarray:
    out = np.empty_like(case.recv)
    comm.Alltoallv([case.send, (case.sendcounts, case.sdispls), MPI.BYTE],
                   [out, (case.recvcounts, case.rdispls), MPI.BYTE])  # fmt: skip
    return out


def parity(world, tmp: Path) -> dict:
    p = world.size
    trace = None
    if world.rank == 0:  # files written once, read by every rank
        rng = np.random.default_rng(9)
        write_matrix(tmp / "odd.txt", rng.integers(0, 4000, (p, p)) * rng.integers(0, 2, (p, p)))
        trace = fold_trace(TRACE, p, tmp / f"trace-{p}.txt")
    trace = world.bcast(trace)
    cases = matrices(p, tmp, trace)
    failures, count = [], 0
    for g in (1, 2, 4, 8):
        if p % g:
            continue
        topo = Topology.create(gpus_per_node=g)
        t = create_transport("cpu", topo)
        variants = CORE + (OPTIONS if 1 < g < p else [])
        impls = [(n, prm, lookup("alltoallv", n).factory(t, dict(prm))) for n, prm in variants]
        for ci, (name, traffic, unit) in enumerate(cases):
            case = make_case(traffic, topo.rank, unit, seed=ci)
            want = reference(topo.world, case)
            for impl_name, prm, impl in impls:
                impl.setup(case)
                wrong = 0
                for _ in range(2):  # twice: the second call reuses the bound plan
                    case.recv.fill(0xFF)
                    impl.run(case)
                    wrong += int(np.count_nonzero(case.recv != want))
                wrong = topo.world.allreduce(wrong)
                count += 1
                if wrong:
                    failures.append(f"G={g} {name} {impl_name} {prm}: {wrong} wrong bytes")
        t.close()
        topo.free()
    return {"cases": count, "failures": failures, "matrices": [c[0] for c in cases]}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def churn(world, tmp: Path, calls: int) -> dict:
    """A new matrix every call: fast+sched (schedule inside run) and fast (setup each)."""
    p = world.size
    g = 2 if p % 2 == 0 else 1
    trace = fold_trace(TRACE, p, tmp / f"churn-{p}.txt", count=200) if world.rank == 0 else None
    trace = world.bcast(trace)
    topo = Topology.create(gpus_per_node=g)
    t = create_transport("cpu", topo)

    def traffic(i: int) -> np.ndarray:
        size = 2048 + (i * 7919) % 30000
        if trace is not None:
            return generate(f"trace:{trace},ranks={p}", p, size, index=i)
        return generate(f"zipf:0.8@{i}", p, size)

    def check(case, i) -> int:
        return int(np.count_nonzero(case.recv != alltoallv_expected(case.traffic, topo.rank, i)))

    def new_case(i):
        d = traffic(i)
        case = AlltoallvCase(d, alltoallv_send_data(d, topo.rank, i),
                             np.zeros(int(d[:, topo.rank].sum()), np.uint8), topo.rank)  # fmt: skip
        return case

    sched_impl = lookup("alltoallv", "fast+sched").factory(t, {})
    sched_impl.setup(new_case(0))
    wrong, rss, t0 = 0, {}, time.perf_counter()
    for i in range(calls):
        case = new_case(i)
        sched_impl.run(case)
        wrong += check(case, i)
        if i in (calls // 10, calls - 1):
            gc.collect()
            rss[i] = rss_bytes()
    seconds = time.perf_counter() - t0
    fast_impl = lookup("alltoallv", "fast").factory(t, {})
    fast_calls = max(1, calls // 5)
    t1 = time.perf_counter()
    for i in range(fast_calls):
        case = new_case(calls + i)
        fast_impl.setup(case)
        fast_impl.run(case)
        wrong += check(case, calls + i)
    fast_seconds = time.perf_counter() - t1
    gc.collect()
    rss_end = rss_bytes()
    stats = world.gather({"rss": rss, "rss_end": rss_end, "seconds": seconds,
                          "fast_seconds": fast_seconds,
                          "scratch": sched_impl.executor.scratch_bytes})  # fmt: skip
    wrong = world.allreduce(wrong)
    t.close()
    topo.free()
    if world.rank != 0:
        return {}
    first, last = calls // 10, calls - 1
    growth = max(s["rss"][last] - s["rss"][first] for s in stats)
    return {
        "calls": calls,
        "fast_calls": fast_calls,
        "gpus_per_node": g,
        "trace": trace is not None,
        "wrong": wrong,
        "rss_growth_bytes": growth,
        "rss_end_max_bytes": max(s["rss_end"] for s in stats),
        "seconds_max": max(s["seconds"] for s in stats),
        "fast_seconds_max": max(s["fast_seconds"] for s in stats),
        "scratch_max_bytes": max(s["scratch"] for s in stats),
    }


class WrongPlanOn:
    """A schedule whose plan for one rank is corrupted (shifts a receive-buffer write)."""

    def __init__(self, sched, rank: int) -> None:
        self._sched, self._rank = sched, rank
        self.nranks, self.gpus_per_node, self.traffic = (
            sched.nranks,
            sched.gpus_per_node,
            sched.traffic,
        )

    def plan(self, rank: int) -> RankPlan:
        pl = self._sched.plan(rank)
        if rank != self._rank:
            return pl
        ops = pl.ops.copy()
        i = int(np.flatnonzero(ops["dst_buf"] == RECV_BUF)[0])
        ops["dst_off"][i] += 1
        return RankPlan(pl.rank, ops, pl.nsteps, pl.buffer_bytes)


def refuse(world) -> dict:
    p = world.size
    g = 4 if p % 4 == 0 else 1
    topo = Topology.create(gpus_per_node=g)
    spy = SpyTransport(create_transport("cpu", topo))
    base = generate("zipf:0.9@11", p, 20000)
    swapped = base.copy()  # same row and column sums for every rank but two
    swapped[[0, 1]] = swapped[[1, 0]]
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    results = {}

    def attempt(label: str, fn) -> None:
        try:
            fn()
            msg = None
        except ValueError as exc:
            msg = str(exc)
        views = world.gather((msg, spy.posted))
        if world.rank == 0:
            results[label] = {
                "refused_on": sum(m is not None for m, _ in views),
                "posted": sum(n for _, n in views),
                "message": views[0][0],
            }

    def disagree():  # rank 3 holds another matrix
        d = base.copy()
        if world.rank == 3 % p:
            d[0, 1] += 1
        impl = lookup("alltoallv", "fast").factory(spy, {})
        impl.setup(make_case(d, topo.rank, 1, 0))
        impl.run(make_case(d, topo.rank, 1, 0))

    def stale_schedule():  # every rank agrees on the traffic; the schedule is another's
        ex = PlanExecutor(spy)
        load(ex, schedule(swapped, g), make_case(base, topo.rank, 1, 0))
        ex.run()

    def other_node_size():
        ex = PlanExecutor(spy)
        load(ex, schedule(base, 1 if g > 1 else p), make_case(base, topo.rank, 1, 0))
        ex.run()

    def corrupt_plan():
        ex = PlanExecutor(spy)
        load(ex, WrongPlanOn(schedule(base, g), 5 % p), make_case(base, topo.rank, 1, 0))
        ex.run()

    def bad_matrix_one_rank():  # the scheduler itself rejects rank 2's matrix
        d = base.copy()
        if world.rank == 2 % p:
            d[1, 1] = -1
        impl = lookup("alltoallv", "fast+sched").factory(spy, {})
        impl.setup(AlltoallvCase(d, np.zeros(0, np.uint8), np.zeros(0, np.uint8), topo.rank))

    for label, fn in (("disagree", disagree), ("stale_schedule", stale_schedule),
                      ("other_node_size", other_node_size), ("corrupt_plan", corrupt_plan),
                      ("bad_matrix_one_rank", bad_matrix_one_rank)):  # fmt: skip
        attempt(label, fn)
    # and the ranks still talk: a good call afterwards is exact
    case = make_case(base, topo.rank, 1, 1)
    impl = lookup("alltoallv", "fast").factory(spy, {})
    impl.setup(case)
    impl.run(case)
    wrong = world.allreduce(int(np.count_nonzero(case.recv != reference(topo.world, case))))
    if world.rank == 0:
        results["after"] = {"wrong": wrong, "posted": spy.posted}
    spy.close()
    topo.free()
    return results


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("tmp", type=Path)
    ap.add_argument("parts", nargs="+", choices=("parity", "refuse", "churn"))
    ap.add_argument("--calls", type=int, default=1000)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    if world.rank == 0:  # one rank compiles a stale numba cache, the others load it
        warmup()
        args.tmp.mkdir(parents=True, exist_ok=True)
    world.Barrier()
    parts = {"parity": lambda: parity(world, args.tmp), "refuse": lambda: refuse(world),
             "churn": lambda: churn(world, args.tmp, args.calls)}  # fmt: skip
    report = {}
    for name in args.parts:
        fn = parts[name]
        t0 = time.perf_counter()
        report[name] = fn()
        if world.rank == 0:
            report[name]["seconds"] = time.perf_counter() - t0
    if world.rank == 0:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
