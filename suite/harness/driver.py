"""``commbench run``: the per-rank driver, started under ``mpiexec`` / ``srun`` / ``ibrun``.

nccl-tests' shape: one harness (sizes, timing, bandwidth, checking, printing, records) and
each implementation a plug-in from :mod:`commbench.kernels.registry`. Flags mean what they mean in
nccl-tests (``-b/-e/-f``, ``-n/-w``, ``-c``, algbw/busbw).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
from dataclasses import dataclass, field

import numpy as np

from commbench import __version__
from commbench.analysis import intervals, records, tiers
from commbench.cluster.netns import current_fabric
from commbench.errors import UsageError
from commbench.harness import collectives, metrics, results
from commbench.harness.backends import check_backend_available, create_transport
from commbench.harness.backends.dtypes import parse_dtype
from commbench.harness.iterclock import IterationClock, latency_calls, slowest_rank_samples
from commbench.harness.system_fabric import STAGE_COST_IMPLS, profile_fabric, stage_cost
from commbench.harness.watchdog import Watchdog
from commbench.harness.workloads import DEFAULT_SEED
from commbench.kernels import timeline
from commbench.kernels.dtypes import dtype_name
from commbench.kernels.registry import BACKENDS, COLLECTIVES, implementations, lookup
from commbench.units import parse_size, size_sweep

OPS = ("sum", "prod", "max", "min")
#: ``--inplace`` value -> the modes measured at each size (False: out of place)
INPLACE_CHOICES = {"0": (False,), "1": (True,), "both": (False, True)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``commbench run`` (nccl-tests' names where they have one)."""
    p.add_argument("collective", help=", ".join(COLLECTIVES))
    p.add_argument("--impl", help="implementation (see --list)")
    p.add_argument("--list", action="store_true", help="list implementations and exit")
    p.add_argument("--backend", default="cpu", help="cpu (default), cuda or rocm")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        metavar="G",
        help="force G ranks per node (emulated nodes); default: from MPI",
    )
    p.add_argument("-b", "--minbytes", default="32M", help="smallest size (K/M/G suffixes)")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplication factor")
    p.add_argument("-i", "--stepbytes", default="0", help="size increment (instead of -f)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="warm-up iterations")
    p.add_argument("-c", "--check", type=int, default=1, help="check correctness (0/1)")
    p.add_argument("-d", "--datatype", default="float", help="element type (bf16, fp16, ...)")
    p.add_argument("-o", "--op", default="sum", help="reduction: sum, prod, max, min")
    p.add_argument("-r", "--root", type=int, default=0, help="root rank (broadcast)")
    p.add_argument(
        "--inplace",
        default="0",
        choices=INPLACE_CHOICES,
        help="in-place buffers as nccl-tests has them (allreduce, allgather, reducescatter, "
        "broadcast): 0 out of place (default), 1 in place, both: each, side by side",
    )
    p.add_argument(
        "-a",
        "--average",
        type=int,
        default=None,
        help="time across ranks for the table: 0 rank0, 1 avg, 2 min, 3 max",
    )
    p.add_argument(
        "-G", "--cudagraph", type=int, default=0, help="calls per captured graph (GPU backends)"
    )
    p.add_argument("--timing", default="pipelined", choices=("pipelined", "latency"))
    p.add_argument(
        "--workload", default=None, help="all-to-allv traffic spec, a list sweeps it (zipf:0.1,0.8)"
    )
    p.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="workload seed (a spec's @SEED wins)"
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm option passed to the implementation (repeatable)",
    )
    p.add_argument(
        "--reference",
        choices=("c",),
        default=None,
        help="also time the MPI library's own collective from C on the same buffers "
        "(OSU/nccl-tests style) and record it beside commbench's time",
    )
    p.add_argument("--out", default=None, help="append JSONL records here")
    p.add_argument(
        "--launch",
        type=int,
        default=None,
        metavar="I",
        help="this run is launch I of a repeated sweep (kept in the records; "
        "`commbench sweep --repeat` sets it)",
    )
    p.add_argument(
        "--tiers",
        action="store_true",
        help="also print where the bytes went: busiest NIC and scale-up port, their rates",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="record every rank's steps of every timed call (post, wait, copy, reduce, ...) "
        "beside the records (<out>.timeline.jsonl); times calls from Python",
    )
    p.add_argument("--resume", action="store_true", help="skip points already in --out")
    p.add_argument(
        "--system",
        default=None,
        help="system stored in the records (default $COMMBENCH_SYSTEM, else local): a "
        "shipped profile's name or a profile file PATH.toml gives fast/fast+sched their "
        "stage cost (stage_cost_bytes) unless --param sets it",
    )
    p.add_argument(
        "--watchdog",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="abort the job when a rank makes no progress (no call returns, no phase "
        "ends) for this long, naming who stopped (0: off)",
    )


# ---------------------------------------------------------------- configuration


@dataclass
class Config:
    collective: str
    impl: str
    backend: str
    gpus_per_node: int | None
    sizes: list[int]
    iters: int
    warmup: int
    check: bool
    dtype: np.dtype
    op: str
    time_reduction: str
    average_flag: int
    graph_iters: int
    timing: str
    workloads: list[str | None]
    seed: int
    params: dict = field(default_factory=dict)
    #: the buffer modes measured at each size, out of place first (``--inplace``)
    inplace: tuple[bool, ...] = (False,)
    root: int = 0
    out: str | None = None
    resume: bool = False
    system: str = "local"
    #: fast/fast+sched's stage cost from the system profile (None: not from a profile)
    stage_cost: dict | None = None
    watchdog_s: float = 300.0
    reference: str | None = None
    launch: int | None = None
    tiers: bool = False
    timeline: bool = False


def parse_params(items: list[str]) -> dict:
    params: dict = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--param {item!r}: write KEY=VALUE, e.g. --param strategy=bottleneck")
        params[key.strip()] = _scalar(value.strip())
    return params


def _scalar(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def make_config(args: argparse.Namespace) -> Config:
    """Validate everything that needs no MPI; every rank reaches the same verdict."""
    coll = args.collective
    if coll not in COLLECTIVES:
        raise UsageError(f"unknown collective {coll!r}: choose one of {', '.join(COLLECTIVES)}")
    if args.backend not in BACKENDS:
        raise UsageError(f"unknown backend {args.backend!r}: choose one of {', '.join(BACKENDS)}")
    if not args.impl:
        raise UsageError(f"give --impl NAME (see `commbench run {coll} --list`)")
    try:
        spec = lookup(coll, args.impl)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    params = parse_params(args.param)
    spec.check_params(params)
    named = args.system or os.environ.get("COMMBENCH_SYSTEM") or None
    stage = None
    if spec.name in STAGE_COST_IMPLS:  # the record says where the stage cost came from
        if "stage_cost_bytes" in params:
            stage = {"bytes": params["stage_cost_bytes"], "source": "--param stage_cost_bytes"}
        else:
            stage = stage_cost(named) or {"bytes": None, "source": "none: the scheduler's "
                                          "default (no --system profile)"}  # fmt: skip
            if stage["bytes"] is not None:
                params["stage_cost_bytes"] = stage["bytes"]
    if params.get("tune", "none") not in ("none", "model"):
        raise UsageError(f"--param tune={params['tune']}: choose none or model")
    if params.get("tune") == "model" and profile_fabric(named) is None:
        raise UsageError(
            f"--impl {spec.name} --param tune=model needs the fabric the model tunes for: "
            "add --system NAME|PATH.toml (a shipped profile or one `commbench calibrate` wrote)"
        )
    dtype = parse_dtype(args.datatype)
    if args.cudagraph < 0 or (args.cudagraph and args.backend == "cpu"):
        raise UsageError("-G (graph capture) needs --backend cuda and a count >= 1")
    problem = spec.support_problem(
        args.backend,
        dtype_name(dtype) if coll in collectives.REDUCING else None,
        args.cudagraph > 0,
    )
    if problem:
        raise UsageError(problem)
    if args.op not in OPS:
        raise UsageError(f"unknown reduction -o {args.op!r}: choose one of {', '.join(OPS)}")
    step = parse_size(args.stepbytes)
    sizes = size_sweep(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor, step)
    if coll in ("allreduce", "broadcast"):
        bad = [s for s in sizes if s % dtype.itemsize]
        if bad:
            raise UsageError(
                f"size {bad[0]} is not a multiple of the {dtype.itemsize}-byte "
                f"{dtype_name(dtype)}: choose -b/-e/-i so every size is"
            )
    if args.iters < 1 or args.warmup_iters < 0:
        raise UsageError("-n must be at least 1 and -w at least 0")
    if args.check not in (0, 1):
        raise UsageError(f"-c takes 0 or 1 (got {args.check})")
    average = args.average if args.average is not None else collectives.DEFAULT_TIME_REDUCTION[coll]
    if average not in metrics.TIME_REDUCTIONS:
        raise UsageError(f"-a takes 0 (rank 0), 1 (avg), 2 (min) or 3 (max), not {average}")
    inplace = INPLACE_CHOICES[args.inplace]
    if args.inplace != "0" and coll not in collectives.IN_PLACE:
        raise UsageError(
            f"--inplace applies to {', '.join(collectives.IN_PLACE)}, not {coll}: drop it"
        )
    if args.root and coll not in collectives.ROOTED:
        raise UsageError(f"-r/--root applies to {', '.join(collectives.ROOTED)}, not {coll}")
    if args.root < 0:
        raise UsageError(f"-r/--root must be a rank >= 0 (got {args.root})")
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node must be at least 1 (got {args.gpus_per_node})")
    if not math.isfinite(args.watchdog) or args.watchdog < 0:
        raise UsageError(
            f"--watchdog {args.watchdog}: give a finite number of seconds >= 0 (0 turns it off)"
        )
    if coll == "alltoallv":
        from commbench.harness.workloads import check_local_inputs, expand_workloads

        workloads: list[str | None] = list(expand_workloads(args.workload or "uniform"))
        for workload in workloads:
            check_local_inputs(workload, dtype.itemsize)
    elif args.workload:
        raise UsageError(f"--workload applies to alltoallv, not {coll}")
    else:
        workloads = [None]
    if args.timeline and args.cudagraph:
        raise UsageError("--timeline stamps every call: drop -G (graph capture) or --timeline")
    if args.timeline and not args.out:
        raise UsageError("--timeline needs --out FILE (the timeline goes beside the records)")
    if args.launch is not None and args.launch < 1:
        raise UsageError(f"--launch {args.launch}: launches are numbered from 1")
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE (the records to resume from)")
    if args.out:
        writer = results.RecordWriter(args.out)
        results.check_output_path(writer.path, "--out")
        results.check_output_path(writer.raw_path, "--out (its raw side file)")
        if args.timeline:
            results.check_output_path(writer.timeline_path, "--out (its timeline side file)")
        if args.resume and writer.path.is_file():
            records.read_done(writer.path)  # a damaged file is refused here, before MPI
    return Config(
        collective=coll,
        impl=args.impl,
        backend=args.backend,
        gpus_per_node=args.gpus_per_node,
        sizes=sizes,
        iters=args.iters,
        warmup=args.warmup_iters,
        check=bool(args.check),
        dtype=dtype,
        op=args.op,
        time_reduction=metrics.TIME_REDUCTIONS[average],
        average_flag=average,
        graph_iters=args.cudagraph,
        timing=args.timing,
        workloads=workloads,
        seed=args.seed,
        params=params,
        inplace=inplace,
        root=args.root,
        out=args.out,
        resume=args.resume,
        system=named or "local",
        stage_cost=stage,
        watchdog_s=args.watchdog,
        reference=args.reference,
        launch=args.launch,
        tiers=args.tiers,
        timeline=args.timeline,
    )


def list_implementations(collective: str | None) -> int:
    for spec in implementations(collective if collective in COLLECTIVES else None):
        notes = "" if spec.capturable else " [no -G]"
        if spec.gpu_dtypes is not None:
            notes += f" [on GPUs: {','.join(spec.gpu_dtypes)}]"
        if spec.pow2_ranks:
            notes += " [2^k ranks]"
        print(
            f"{spec.collective:10s} {spec.name:18s} {','.join(spec.backends):15s} "
            f"{spec.summary}{notes}"
        )
    return 0


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> int:
    if args.list:
        return list_implementations(args.collective)
    cfg = make_config(args)
    if cfg.backend != "cpu":  # before the device is opened: CUDA reads it at context creation
        os.environ.update(lookup(cfg.collective, cfg.impl).env)
    check_backend_available(cfg.backend)
    watchdog = Watchdog(cfg.watchdog_s)
    watchdog.start("starting MPI")
    from mpi4py import MPI

    from commbench.harness.topology import check_gpus_per_node

    if cfg.gpus_per_node is not None:
        try:
            check_gpus_per_node(MPI.COMM_WORLD.size, cfg.gpus_per_node)
        except UsageError:
            watchdog.stop(guard_exit=False)
            raise
    rank = MPI.COMM_WORLD.rank
    problem = ranks_problem(cfg, MPI.COMM_WORLD.size)
    if problem is None and cfg.reference:  # each rank checks; the first reason is said once
        problem = next(filter(None, MPI.COMM_WORLD.allgather(reference_problem(cfg))), None)
    if problem:  # every rank knows; rank 0 says it, once
        watchdog.stop(guard_exit=False)
        if rank:
            return 2
        raise UsageError(problem)
    # the launcher's SIGTERM (Ctrl-C on mpiexec, scancel) is handled between two Python
    # steps, so a record being written is finished first and never left torn
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        watchdog.phase("sharing heartbeats (MPI start-up)")
        watchdog.attach(MPI.COMM_WORLD, MPI.COMM_WORLD.Abort)
        status = Sweep(cfg, watchdog).run()
        watchdog.stop()
        return status
    except BaseException as exc:  # one rank's failure ends the whole job, with its message
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        sys.stdout.flush()
        host = socket.gethostname()
        if isinstance(exc, KeyboardInterrupt):
            why = "interrupted; the records written so far are whole: rerun with --resume"
        else:
            why = f"error: {type(exc).__name__}: {exc}"
        sys.stderr.write(f"commbench run: rank {rank} on {host}: {why}\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(2 if isinstance(exc, ValueError) else 1)
        return 1


def reference_problem(cfg: Config) -> str | None:
    """Why ``--reference c`` cannot run on this rank (one line), or None: it needs the native
    loop and, on a GPU, an MPI library that takes device memory."""
    from commbench.kernels import native

    reason = native.unavailable_reason()
    if reason is None and cfg.backend != "cpu":
        from commbench.kernels.baselines.mpi import mpi_gpu_support

        aware, how = mpi_gpu_support(cfg.backend)
        reason = None if aware else f"the MPI library takes no device buffers ({how})"
    return f"--reference c cannot run here: {reason}" if reason else None


def ranks_problem(cfg: Config, nranks: int) -> str | None:
    """Why ``cfg`` cannot run on ``nranks`` ranks (one line), or None."""
    problem = lookup(cfg.collective, cfg.impl).ranks_problem(nranks)
    if problem is None and cfg.root >= nranks:
        problem = f"-r/--root {cfg.root} is not a rank of this {nranks}-rank job"
    return problem


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


TIERS_NOTE = (
    "tiers: busiest NIC and scale-up port (bytes per call, MB = 1e6), their rate and % of the "
    "profile's, time / lower bound"
)
#: (header, unit, width) of the --tiers columns
TIER_COLUMNS = (
    ("NIC", "(MB)", 9),
    ("NIC", "(GB/s)", 8),
    ("NIC", "%line", 6),
    ("scaleup", "(MB)", 9),
    ("scaleup", "(GB/s)", 8),
    ("scaleup", "%line", 6),
    ("t/lb", "", 7),
)


def tier_cells(t: dict | None) -> str:
    """The --tiers cells of one record (blank where unknown)."""
    if not isinstance(t, dict):
        return "".join(f" {'-':>{w}s}" for _, _, w in TIER_COLUMNS)

    def num(key: str, scale: float, fmt: str) -> str:
        v = t.get(key)
        return format(v * scale, fmt) if isinstance(v, (int, float)) else "-"

    cells = (
        num("nic_bytes", 1e-6, ".3f"),
        num("nic_GBps", 1, ".3f"),
        num("nic_fraction", 100, ".1f"),
        num("scaleup_bytes", 1e-6, ".3f"),
        num("scaleup_GBps", 1, ".3f"),
        num("scaleup_fraction", 100, ".1f"),
        num("time_over_lb", 1, ".2f"),
    )
    return "".join(f" {c:>{w}s}" for c, (_, _, w) in zip(cells, TIER_COLUMNS, strict=True))


class Sweep:
    """One invocation: topology, transport, implementation, then every point."""

    def __init__(self, cfg: Config, watchdog: Watchdog | None = None) -> None:
        from commbench.harness.topology import Topology

        self.cfg = cfg
        self.watchdog = watchdog = watchdog or Watchdog(0)
        watchdog.phase("building the rank topology")
        self.topo = Topology.create(gpus_per_node=cfg.gpus_per_node)
        watchdog.set_rank(self.topo.rank)
        watchdog.phase(f"creating the {cfg.backend} transport")
        self.transport = create_transport(cfg.backend, self.topo)
        watchdog.phase(f"creating --impl {cfg.impl}")
        self.impl = lookup(cfg.collective, cfg.impl).factory(self.transport, dict(cfg.params))
        if cfg.params.get("tune") == "model":  # the model's fabric, at this run's node size
            table, node_gpus, path = profile_fabric(cfg.system)
            self.impl.tune_with(table.per_gpu(node_gpus, self.topo.gpus_per_node), str(path))
        self.rank = self.topo.rank
        self.is_root = self.rank == 0
        self.writer = results.RecordWriter(cfg.out if self.is_root else None)
        self._traffic = None  # rank 0: the point's traffic matrix (where the bytes went)
        watchdog.phase("sharing the run id and device list")
        launch = results.new_launch_id() if self.is_root else None
        ids = (results.new_run_id(launch), launch) if self.is_root else None
        self.run_id, self.launch_id = self.topo.world.bcast(ids)
        info = self.transport.describe()
        self.devices = self.topo.world.gather(
            (self.rank, self.topo.node, self.topo.local, os.getpid(), self.topo.hostname, info)
        )
        self.static = self._static_fields(info) if self.is_root else {}

    def _static_fields(self, info: dict) -> dict:
        cfg, topo = self.cfg, self.topo
        return {
            "run_id": self.run_id,
            "launch_id": self.launch_id,
            "git_sha": results.git_sha(),
            "system": cfg.system,
            "hostnames": sorted({d[4] for d in self.devices}),
            "nodes": topo.nodes,
            "gpus_per_node": topo.gpus_per_node,
            "nranks": topo.size,
            "backend": cfg.backend,
            "collective": cfg.collective,
            "impl": cfg.impl,
            "params": cfg.params,
            "dtype": dtype_name(cfg.dtype),
            "op": cfg.op if cfg.collective in collectives.REDUCING else None,
            "timing_mode": cfg.timing,
            "iters": cfg.iters,
            "warmup": cfg.warmup,
            "graph_iters": cfg.graph_iters,
            "time_reduction": cfg.time_reduction,
            "modelled": False,
            "reference": cfg.reference,
            "versions": results.versions(info),
            # with what the driver set for the implementation (ImplSpec.env) on a GPU
            "env": {**results.captured_env(), **self._impl_env()},
            "emulated_fabric": current_fabric(),
            "mpi_thread_level": _mpi_thread_level(),
            **({"root": cfg.root} if cfg.collective in collectives.ROOTED else {}),
            "launch": cfg.launch,
        }

    def _impl_env(self) -> dict:
        if self.cfg.backend == "cpu":
            return {}
        return {k: os.environ.get(k, "") for k in lookup(self.cfg.collective, self.cfg.impl).env}

    # ------------------------------------------------------------ points

    def _points(self):
        for workload in self.cfg.workloads:
            for size in self.cfg.sizes:
                yield workload, size

    def _build(self, workload: str | None, size: int, inplace: bool = False) -> collectives.Point:
        cfg = self.cfg
        return collectives.build_point(
            self.transport, cfg.collective, size, cfg.dtype, op=cfg.op, root=cfg.root,
            inplace=inplace, workload=workload, seed=cfg.seed,
        )  # fmt: skip

    def _key_fields(self, workload: str | None, size: int, inplace: bool = False) -> dict:
        rec = dict(self.static)
        rec.update(size_bytes=size, workload=workload, seed=self._seed(workload))
        if self.cfg.collective in collectives.IN_PLACE:
            rec["inplace"] = int(inplace)
        return rec

    def _seed(self, workload: str | None) -> int | None:
        if workload is None:
            return None
        from commbench.harness.workloads import parse_workload

        w = parse_workload(workload)
        return w.seed if w.seed is not None else self.cfg.seed

    def run(self) -> int:
        cfg, wd = self.cfg, self.watchdog
        points = list(self._points())
        done: dict[str, dict] = {}  # rank 0: the records --resume finds, by point key
        if self.is_root:
            wd.phase(f"repairing and reading {cfg.out}")
            for message in self.writer.repair():
                sys.stderr.write(f"commbench run: {message}\n")
            if cfg.resume:
                done = records.read_done(cfg.out)
        wd.phase("timing the harness overhead")
        overhead_us = self._harness_overhead_us()
        if self.is_root:
            self._print_header(overhead_us)
        total_wrong = 0
        bus = []
        for index, (workload, size) in enumerate(points):
            row, resumed = [], 0  # rank 0: the records of this size, one per --inplace mode
            for inplace in cfg.inplace:
                what = (
                    f"point {index + 1}/{len(points)}, {cfg.collective} --impl {cfg.impl} at "
                    f"size {size}"
                    + (f" workload {workload}" if workload else "")
                    + (" in place" if inplace else "")
                )
                wd.phase(f"{what}: agreeing whether to skip it (--resume)")
                key = None
                if self.is_root:
                    key = records.point_key(self._key_fields(workload, size, inplace))
                if self.topo.world.bcast(key in done):
                    if self.is_root:  # the table stays whole across interruptions and resumes
                        row.append(done[key])
                        resumed += 1
                    continue
                self._progress(index, len(points), what)
                measured = self._measure(index, workload, size, what, inplace)
                wd.phase(f"{what}: gathering every rank's times")
                gathered = self.topo.world.gather(measured)
                if self.is_root:
                    rec, raw = self._record(index, workload, size, gathered, overhead_us, inplace)
                    spans = self._timeline_rows(raw, gathered) if cfg.timeline else None
                    wd.phase(f"{what}: writing the record to {cfg.out}")
                    self.writer.write(rec, raw, spans)
                    total_wrong += rec["nwrong"]
                    bus.append(rec["busbw_GBps"])
                    row.append(rec)
            if self.is_root:
                note = "  (--resume: recorded before)" if resumed == len(row) else ""
                if 0 < resumed < len(row):  # one --inplace mode was, the other not
                    note = f"  (--resume: {resumed} of {len(row)} recorded before)"
                self._print_row(row, note=note)
        if self.is_root:
            self._progress_done()
            self._print_footer(total_wrong, bus)
        wd.phase("finishing: sharing the wrong-value count")
        total_wrong = self.topo.world.bcast(total_wrong)
        wd.phase("finishing: closing the implementation and transport")
        if hasattr(self.impl, "close"):
            self.impl.close()
        self.transport.close()
        wd.phase("finishing: waiting for every rank")
        self.topo.world.Barrier()
        return 1 if total_wrong else 0

    def _measure(
        self,
        index: int,
        workload: str | None,
        size: int,
        what: str = "measuring",
        inplace: bool = False,
    ) -> dict:
        cfg, t, impl, wd = self.cfg, self.transport, self.impl, self.watchdog
        wd.phase(f"{what}: building the buffers")
        point = self._build(workload, size, inplace)
        case = point.case
        self._traffic = getattr(case, "traffic", None) if self.is_root else None
        collectives.fill(t, point, rep=index)
        wd.phase(f"{what}: setup")
        impl.setup(case)
        for _ in wd.counting(f"{what}: warm-up calls", cfg.warmup):
            impl.run(case)
        t.synchronize()
        samples = None
        native_call = impl.native_call(case) if hasattr(impl, "native_call") else None
        if cfg.timeline:  # the C loop cannot stamp the calls: time them from Python
            native_call = None
        rec = self._recorder()
        # The C reference runs once before and once after commbench's calls and counts as
        # their mean: on oversubscribed cores the first of two identical back-to-back loops
        # reads up to ~15 % slower, an order effect this cancels (the same C loop read
        # 1.11-1.19x "itself" when it always went first).
        reference_before = self._time_reference(case, what) if cfg.reference else None
        if native_call is not None and not cfg.graph_iters:
            timing = self._time_native(native_call, what)
            per_call_us, samples, progress = timing
            host_us = per_call_us  # the host issues the call and waits for it: one span
        elif cfg.timing == "pipelined":
            runner = self._graph(case) if cfg.graph_iters else None
            calls = cfg.iters if runner is None else -(-cfg.iters // cfg.graph_iters)
            clock = IterationClock(t, calls, cfg.graph_iters or 1)
            wd.phase(f"{what}: barrier before the timed calls")
            t.barrier()
            t0 = t.now()
            clock.start()
            tick = clock.tick
            if rec is not None:
                rec.origin = t0
                with timeline.recording(rec):
                    for i in wd.counting(f"{what}: timed calls (--timeline)", calls):
                        rec.begin(i, rec.now())
                        impl.run(case)
                        tick()
                        rec.end(rec.now())
            elif runner is None:
                call = impl.run
                for _ in wd.counting(f"{what}: timed calls", calls):
                    call(case)
                    tick()
            else:
                for _ in wd.counting(f"{what}: timed graph launches", calls):
                    runner()
                    tick()
            issued = t.now()
            t.synchronize()
            elapsed = t.now() - t0
            # one untimed call after the timed ones (:func:`latency_calls`): a rank done
            # early waits in it instead of running the code below while others still run
            # their last timed call
            runner() if runner is not None else impl.run(case)
            t.synchronize()
            per_call_us = elapsed / (calls * (cfg.graph_iters or 1)) * 1e6
            host_us = (issued - t0) / (calls * (cfg.graph_iters or 1)) * 1e6
            progress = clock.progress()
        else:
            timed = latency_calls(cfg.iters)
            samples = np.empty(timed.stop + 1)
            issued_us = np.empty(timed.stop + 1)
            if rec is not None:
                rec.origin = t.now()
            with timeline.recording(rec):
                for i in wd.counting(f"{what}: timed calls (latency)", timed.stop + 1):
                    t.barrier()
                    t0 = t.now()
                    if rec is not None:
                        rec.begin(i - timed.start, t0)
                    impl.run(case)
                    issued = t.now()
                    t.synchronize()
                    t1 = t.now()
                    samples[i] = (t1 - t0) * 1e6
                    issued_us[i] = (issued - t0) * 1e6
                    if rec is not None:
                        rec.end(t1)
            samples = samples[timed]
            per_call_us = float(samples.mean())
            host_us = float(issued_us[timed].mean())
            progress = None
        reference_pair = None
        if reference_before is not None:
            reference_pair = (reference_before, self._time_reference(case, what))
        # One call started together after a barrier: when did this rank finish?
        wd.phase(f"{what}: the finish-time call")
        t.barrier()
        t0 = t.now()
        impl.run(case)
        t.synchronize()
        finish_us = (t.now() - t0) * 1e6
        t.barrier()  # a rank done early waits here, yielding its core (see latency_calls)
        nwrong = 0
        if cfg.check:
            wd.phase(f"{what}: the checked call")
            collectives.fill(t, point, rep=index)
            t.barrier()
            impl.run(case)
            nwrong = collectives.count_wrong(t, point, rep=index)
        info = impl.info() if hasattr(impl, "info") else {}
        if cfg.stage_cost is not None:
            info = {**info, "stage_cost": cfg.stage_cost}
        return {
            "time_us": per_call_us,
            "host_us": host_us,
            "reference_pair_us": reference_pair,
            "timed_loop": "python" if native_call is None else "native",
            "samples": samples,
            "progress": progress,
            "finish_us": finish_us,
            "nwrong": nwrong,
            "count": point.count,
            "metric_bytes": point.metric_bytes,
            "info": info,
            "timeline": None if rec is None else [r for r in rec.rows() if 0 <= r[0] < cfg.iters],
            timeline.LOOP_START: None if rec is None else rec.loop_start_us(),
        }

    def _recorder(self) -> timeline.Recorder | None:
        """The recorder of this point's timed calls (``--timeline``), else None. On a GPU
        backend every stamp first waits for the stream, so spans are device times (and the
        calls lose their overlap with the host: compare such runs with each other only)."""
        if not self.cfg.timeline:
            return None
        t = self.transport
        if t.name == "cpu":
            return timeline.Recorder(t.now)

        def now() -> float:
            t.synchronize()
            return t.now()

        return timeline.Recorder(now)

    def _timeline_rows(self, raw: dict, gathered: list[dict]) -> list[dict]:
        """One row per span of every rank (rank 0), keyed like the raw line."""
        key = {k: raw[k] for k in (*records.SIDE_LINK, "size_bytes", "workload")}
        key.update(impl=self.cfg.impl, timing_mode=self.cfg.timing, launch=self.cfg.launch)
        return [
            {
                **key,
                "rank": rank,
                **dict(zip(timeline.COLUMNS, span, strict=True)),
                timeline.LOOP_START: g[timeline.LOOP_START],
            }
            for rank, g in enumerate(gathered)
            for span in g["timeline"]
        ]

    def _time_native(self, call, what: str):
        """The timed calls with the loop in C (:mod:`commbench.kernels.native`): its
        :class:`~commbench.kernels.native.Timing`. The loop's counter is the watchdog's
        progress."""
        from commbench.kernels import native

        cfg = self.cfg
        self.transport.synchronize()
        progress = np.zeros(1, dtype=np.int64)
        self.watchdog.phase(
            f"{what}: timed calls (native loop)", _NativeProgress(progress, cfg.iters)
        )
        # warmed up in C too, as the C reference is (the Python warm-up ran mpi4py's call)
        return native.time_call(call, cfg.iters, cfg.timing, warmup=cfg.warmup, progress=progress)

    def _time_reference(self, case, what: str) -> float:
        """The MPI library's own collective on the same buffers, timed from C the same way."""
        from commbench.kernels import native

        cfg = self.cfg
        call = native.library_call(cfg.collective, case, self.topo.world)
        self.transport.synchronize()
        progress = np.zeros(1, dtype=np.int64)
        self.watchdog.phase(
            f"{what}: the C reference's calls", _NativeProgress(progress, cfg.iters)
        )
        return native.time_call(
            call, cfg.iters, cfg.timing, warmup=cfg.warmup, progress=progress
        ).per_call_us

    def _graph(self, case):
        """Capture ``graph_iters`` calls in one CUDA/HIP graph; return its launcher."""
        stream = self.transport.stream
        stream.begin_capture()
        try:
            for _ in range(self.cfg.graph_iters):
                self.impl.run(case)
        finally:
            graph = stream.end_capture()
        return lambda: graph.launch(stream)

    def _harness_overhead_us(self, calls: int = 2000) -> float:
        """Per-call cost of the timed loop itself: an empty call through the same path."""

        class Empty:
            def run(self, case) -> None:
                pass

        empty, t = Empty(), self.transport
        t0 = t.now()
        for _ in range(calls):
            empty.run(None)
        t.synchronize()
        return (t.now() - t0) / calls * 1e6

    def _record(
        self, index, workload, size, gathered, overhead_us, inplace: bool = False
    ) -> tuple[dict, dict]:
        cfg = self.cfg
        times = np.array([g["time_us"] for g in gathered])
        samples = np.array([g["samples"] for g in gathered]) if cfg.timing == "latency" else None
        rec = self._key_fields(workload, size, inplace)
        rec["timestamp"] = results.timestamp()
        rec["point"] = index
        rec["count"] = gathered[0]["count"]
        rec["metric_bytes"] = gathered[0]["metric_bytes"]
        rec.update(metrics.summarise(times, samples))
        shown = metrics.reduce_times(times, cfg.time_reduction)
        host = np.array([g["host_us"] for g in gathered])
        rec.update(
            host_us=metrics.reduce_times(host, cfg.time_reduction),
            rank_host_us=host.tolist(),
            host_bound=metrics.host_bound(cfg.backend, host, times),
            timed_loop=gathered[0]["timed_loop"],
        )
        if cfg.reference:
            pairs = np.array([g["reference_pair_us"] for g in gathered])  # (before, after)
            ref = pairs.mean(axis=1)
            rec["reference_time_us"] = metrics.reduce_times(ref, cfg.time_reduction)
            rec["rank_reference_us"] = ref.tolist()
            rec["rank_reference_pair_us"] = pairs.tolist()
        factor = metrics.busbw_factor(cfg.collective, self.topo.size)
        algbw = metrics.algbw_GBps(rec["metric_bytes"], shown)
        rec.update(
            time_us=shown,
            algbw_GBps=algbw,
            busbw_GBps=algbw * factor,
            busbw_factor=factor,
            nwrong=int(sum(g["nwrong"] for g in gathered)),
            rank_time_us=times.tolist(),
            rank_finish_us=[g["finish_us"] for g in gathered],
            harness_overhead_us=overhead_us,
            info=gathered[0]["info"],
        )
        # the interval: per iteration, the slowest rank's time (analysis.intervals)
        if samples is not None:  # calls between barriers: each call's slowest rank
            slowest = samples.max(axis=0)
        else:
            since = [g["progress"][0] for g in gathered]
            slowest = slowest_rank_samples(since, gathered[0]["progress"][1])
        rec.update(intervals.interval_fields(slowest))
        sched = getattr(self.impl, "schedule", None)  # FAST's: the routes its bytes took
        rec["tiers"] = tiers.record_tiers(
            rec, self._traffic, sched.transfers() if hasattr(sched, "transfers") else None
        )
        raw = {
            "run_id": self.run_id,
            "launch_id": self.launch_id,
            "point": index,
            "size_bytes": size,
            "workload": workload,
            "inplace": rec.get("inplace"),
            "timing_mode": cfg.timing,
            "rank_time_us": times.tolist(),
            "samples_us": samples.tolist() if samples is not None else None,
            "launch": cfg.launch,
        }
        return rec, raw

    # ------------------------------------------------------------ printing (rank 0)

    def _print_header(self, overhead_us: float) -> None:
        cfg, topo = self.cfg, self.topo
        print(
            f"# commbench {__version__}: {cfg.collective} --impl {cfg.impl}  backend {cfg.backend}"
        )
        print(
            f"#  nranks {topo.size}  nodes {topo.nodes} x gpus_per_node {topo.gpus_per_node}"
            f"  minBytes {cfg.sizes[0]}  maxBytes {cfg.sizes[-1]}  warmup iters {cfg.warmup}"
            f"  iters {cfg.iters}  validation {int(cfg.check)}  graph {cfg.graph_iters}"
        )
        print(
            f"#  timing {cfg.timing}  time shown: {cfg.time_reduction} over ranks "
            f"(-a {cfg.average_flag})  params {cfg.params or '{}'}"
        )
        print(f"#  harness overhead (empty timed loop): {overhead_us:.3f} us per call")
        print("#")
        print("# Using devices")
        for rank, node, local, pid, host, info in self.devices:
            print(
                f"#  Rank {rank:3d} Group {node:3d} Local {local:2d} Pid {pid:7d} "
                f"on {host:>12s} device {info.get('device', '?')}"
            )
        print("#")
        metric = (
            "algbw = busiest rank's max(send, recv) bytes / time"
            if cfg.collective == "alltoallv"
            else "algbw = size / time"
        )
        print(f"#  {metric}; busbw = algbw x {metrics.busbw_factor(cfg.collective, topo.size):.4f}")
        print(
            "#  95% CI: bootstrap interval of the median per-iteration time of the slowest "
            "rank; n: its samples"
        )
        if cfg.tiers:
            print(f"#  {TIERS_NOTE}")
        if cfg.reference:
            print("#  C ref = the MPI library's collective timed from C on the same buffers")
        extra = self._extra_columns()
        keys = (f"{'size':>12s} {'count':>12s} {'type':>9s} {'redop':>6s}"
                + "".join(f" {name:>{w}s}" for name, w, _ in extra))  # fmt: skip
        more, more_units = self._interval_headers()
        group = f"{'time':>10s} {'algbw':>8s} {'busbw':>8s} {'#wrong':>7s}{more}"
        units = f"{'(us)':>10s} {'(GB/s)':>8s} {'(GB/s)':>8s} {'':>7s}{more_units}"
        if cfg.reference:
            group += f" {'C ref':>10s} {'x C':>6s}"
            units += f" {'(us)':>10s} {'':>6s}"
        if cfg.collective in collectives.IN_PLACE:  # which buffers each group of columns had
            titles = [f"{'in-place' if m else 'out-of-place':^{len(group)}s}" for m in cfg.inplace]
            print(f"# {'':{len(keys)}s} " + " ".join(titles))
        print(f"# {keys} " + " ".join(group for _ in cfg.inplace))
        head = f"{'(B)':>12s} {'(elements)':>12s}"
        print(f"# {head:{len(keys)}s} " + " ".join(units for _ in cfg.inplace))
        sys.stdout.flush()

    def _reference_columns(self, rec: dict) -> str:
        """``--reference c``: the C reference's time and commbench / C."""
        if not self.cfg.reference:
            return ""
        c_us = rec.get("reference_time_us")
        return f" {c_us:10.2f} {rec['time_us'] / c_us:6.3f}" if c_us else f" {'-':>10s} {'':>6s}"

    def _extra_columns(self) -> list[tuple[str, int, str]]:
        """(title, width, record field) of the columns after redop: the workload of an
        all-to-allv, the root of a broadcast."""
        if self.cfg.collective == "alltoallv":
            return [("workload", 14, "workload")]
        if self.cfg.collective in collectives.ROOTED:
            return [("root", 6, "root")]
        return []

    def _print_row(self, row: list[dict], note: str = "") -> None:
        """One line per size: the key columns, then time/algbw/busbw/#wrong per mode."""
        rec = row[0]
        op = rec["op"] or "none"
        extra = "".join(f" {str(rec.get(f))[:w]:>{w}s}" for _, w, f in self._extra_columns())
        groups = " ".join(
            f"{r['time_us']:10.2f} {r['algbw_GBps']:8.3f} {r['busbw_GBps']:8.3f} {r['nwrong']:7d}"
            + self._interval_columns(r)
            + self._reference_columns(r)
            for r in row
        )
        if any(r.get("host_bound") for r in row):
            note = "  host-bound" + note
        print(
            f"  {rec['size_bytes']:12d} {rec['count']:12d} {rec['dtype']:>9s} {op:>6s}{extra} "
            f"{groups}{note}"
        )
        sys.stdout.flush()

    def _interval_headers(self) -> tuple[str, str]:
        """Header cells after #wrong: the interval, and the tiers with --tiers."""
        names = f" {'95% CI':>23s} {'n':>4s}"
        units = f" {'(us)':>23s} {'':>4s}"
        if self.cfg.tiers:
            names += "".join(f" {h:>{w}s}" for h, _, w in TIER_COLUMNS)
            units += "".join(f" {u:>{w}s}" for _, u, w in TIER_COLUMNS)
        return names, units

    def _interval_columns(self, rec: dict) -> str:
        ci = intervals.record_interval(rec)
        text = f" {ci.text():>23s} {ci.samples:4d}"
        if self.cfg.tiers:
            text += tier_cells(rec.get("tiers"))
        return text

    def _print_footer(self, total_wrong: int, bus: list[float]) -> None:
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        avg = float(np.mean(bus)) if bus else 0.0
        print(f"# Avg bus bandwidth    : {avg:.4f}")
        if self.cfg.out:
            print(f"# Records appended to {self.cfg.out}")
        print("#")
        sys.stdout.flush()

    def _progress(self, index: int, total: int, what: str) -> None:
        if self.is_root and sys.stderr.isatty():
            sys.stderr.write(f"\r\033[K[{index + 1}/{total}] {what}")
            sys.stderr.flush()

    def _progress_done(self) -> None:
        if sys.stderr.isatty():
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


class _NativeProgress:
    """A native loop's counter seen as an iterator's remaining length (the watchdog's
    progress, read with ``operator.length_hint``)."""

    def __init__(self, counter: np.ndarray, total: int) -> None:
        self.counter, self.total = counter, total

    def __length_hint__(self) -> int:
        return self.total - int(self.counter[0])


def _mpi_thread_level() -> str:
    """The thread level MPI was started with (``commbench.MPI_THREAD_LEVEL`` unless
    ``MPI4PY_RC_THREAD_LEVEL`` said otherwise): it changes what a small call costs."""
    from mpi4py import MPI

    names = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
             MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}  # fmt: skip
    return names.get(MPI.Query_thread(), str(MPI.Query_thread()))
