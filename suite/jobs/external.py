"""External baselines: nccl-tests / rccl-tests and the OSU micro-benchmarks.

Two halves, both pure: what a job runs (:func:`external_command`: the binary for a step's
collective and its flags, from the same sizes, dtype and iterations as the commbench step)
and what comes back (:func:`parse_nccl_tests`, :func:`parse_osu`: their text output,
:func:`parse_tests_document`: nccl-tests' ``-J`` JSON file, :func:`parse_tests_json`:
rccl-tests' JSON lines; into commbench point records, ``impl`` = ``nccl-tests:all_reduce``,
``osu:osu_allreduce``, ...). A line that cannot be read is a ``ValueError`` naming
``FILE:LINE``. A record may carry per-iteration times under :data:`RAW_KEY`, for the
records' raw side file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from commbench.harness.collectives import IN_PLACE
from commbench.harness.metrics import algbw_GBps, busbw_factor
from commbench.kernels.registry import BACKENDS

TOOLS = ("nccl-tests", "rccl-tests", "osu")
#: The site value (a folder holding the binaries) each tool is found through.
SITE_KEYS = {"nccl-tests": "nccl_tests", "rccl-tests": "rccl_tests", "osu": "osu"}
#: Which backends a tool runs on (rccl-tests are nccl-tests built against RCCL).
TOOL_BACKENDS = {
    "nccl-tests": ("cuda",),
    "rccl-tests": ("rocm",),
    "osu": BACKENDS,
}
NCCL_TESTS_BINARIES = {
    "all_reduce_perf": "allreduce",
    "all_gather_perf": "allgather",
    "reduce_scatter_perf": "reducescatter",
    "broadcast_perf": "broadcast",
    "alltoall_perf": "alltoall",
    "alltoallv_perf": "alltoallv",
    "sendrecv_perf": "sendrecv",
}
OSU_BINARIES = {
    "osu_allreduce": "allreduce",
    "osu_allgather": "allgather",
    "osu_reduce_scatter": "reducescatter",
    "osu_bcast": "broadcast",
    "osu_alltoall": "alltoall",
    "osu_alltoallv": "alltoallv",
    "osu_latency": "sendrecv",
}
_NCCL_RUNS = {
    "allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
    "reducescatter": "reduce_scatter_perf", "broadcast": "broadcast_perf",
    "alltoall": "alltoall_perf",
}  # fmt: skip
#: The binary a tool runs for a commbench collective (absent: the tool has none; nccl-tests'
#: alltoallv_perf needs a traffic-matrix file a job does not write: imported only).
BINARY_FOR = {
    "nccl-tests": _NCCL_RUNS,
    "rccl-tests": _NCCL_RUNS,
    "osu": {"allreduce": "osu_allreduce", "allgather": "osu_allgather",
            "reducescatter": "osu_reduce_scatter", "broadcast": "osu_bcast",
            "alltoall": "osu_alltoall", "alltoallv": "osu_alltoallv"},
}  # fmt: skip
#: Collectives whose OSU message size is per peer: a commbench size is that times the ranks.
OSU_PER_PEER = ("allgather", "alltoall", "alltoallv")
#: A record's per-iteration times (popped by ``commbench import`` into the raw side file).
RAW_KEY = "_raw"
#: commbench dtype name -> nccl-tests ``-d`` name.
NCCL_TESTS_DTYPES = {
    "float32": "float",
    "float16": "half",
    "bfloat16": "bfloat16",
    "float64": "double",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
}
#: nccl-tests ``type`` column -> commbench dtype name.
NCCL_TESTS_TYPES = {v: k for k, v in NCCL_TESTS_DTYPES.items()} | {"bf16": "bfloat16"}
#: commbench dtype name -> OSU ``-T`` (OMB 7.2 and later); others run OSU's default type.
OSU_DTYPES = {"float32": "mpi_float", "int32": "mpi_int", "int8": "mpi_char", "uint8": "mpi_char"}


@dataclass(frozen=True)
class ExternalCommand:
    tool: str
    binary: str
    args: tuple[str, ...]


def parse_external(entry: str, collective: str) -> tuple[str, str | None]:
    """``TOOL`` or ``TOOL:BINARY`` from an experiment step's ``external`` list."""
    tool, _, binary = entry.partition(":")
    if tool not in TOOLS:
        raise ValueError(f"external {entry!r}: the tool must be one of {', '.join(TOOLS)}")
    known = NCCL_TESTS_BINARIES if tool != "osu" else OSU_BINARIES
    if binary and binary not in known:
        raise ValueError(f"external {entry!r}: {tool} binaries are {', '.join(known)}")
    return tool, binary or BINARY_FOR[tool].get(collective)


def external_command(
    tool: str,
    binary: str,
    *,
    min_size: int,
    max_size: int,
    factor: int,
    iters: int,
    warmup: int,
    check: int,
    dtype: str | None,
    backend: str,
    osu_device: str = "",
) -> ExternalCommand:
    """The binary's flags for one commbench step's sweep (sizes in bytes)."""
    if tool == "osu":
        args = ["-m", f"{min_size}:{max_size}", "-i", str(iters), "-x", str(warmup)]
        if dtype in OSU_DTYPES and binary != "osu_latency":
            args += ["-T", OSU_DTYPES[dtype]]
        if osu_device and backend != "cpu":
            args += ["-d", osu_device]
        if binary == "osu_latency":
            args += ["D", "D"] if osu_device and backend != "cpu" else []
        return ExternalCommand(tool, binary, tuple(args))
    args = ["-b", str(min_size), "-e", str(max_size), "-f", str(factor)]
    args += ["-n", str(iters), "-w", str(warmup), "-c", str(check), "-g", "1"]
    if dtype:
        args += ["-d", NCCL_TESTS_DTYPES.get(dtype, dtype)]
    return ExternalCommand(tool, binary, tuple(args))


# ---------------------------------------------------------------- parsing

_TAG_RE = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # Open MPI --tag-output
_NCCL_FAIL_RE = re.compile(
    r"(Test (?:NCCL|CUDA|HIP|RCCL) failure|Test failure|Out of bounds values : [1-9]\d* FAILED)"
)
_NCCL_VERSION_RE = re.compile(r"(?:nccl-tests version (\S+)|(?:NCCL|RCCL) version (\S+))")
_NCCL_HEADER_RE = re.compile(r"^#?\s*size\s+count\s+type\b")
_NCCL_BINARY_RE = re.compile(r"\b(" + "|".join(NCCL_TESTS_BINARIES) + r")\b")
_REDUCTION_OPS = ("sum", "prod", "max", "min", "avg", "mulsum")
_RANK_RE = re.compile(r"^#?\s*Rank\s+(\d+)\b")
_OSU_TITLE_RE = re.compile(r"^# OSU MPI(?:-(CUDA|ROCM|ROCm))? (.+?) Test v(\S+)", re.I)
_OSU_DATATYPE_RE = re.compile(r"^# Datatype: (MPI_\w+)")
#: OSU's ``# Datatype:`` line -> commbench dtype name.
OSU_TYPES = {"MPI_CHAR": "int8", "MPI_INT": "int32", "MPI_FLOAT": "float32"}
_OSU_FAIL_RE = re.compile(r"(Validation Failed|Caught signal|[Ee]rror|Abort|ABORT)")


def _lines(text: str):
    for lineno, raw in enumerate(text.splitlines(), start=1):
        yield lineno, _TAG_RE.sub("", raw).rstrip()


def _number(token: str, where: str, what: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise ValueError(
            f"{where}: {what} {token!r} is not a number (truncated or garbled output)"
        ) from None


def _record(
    *,
    tool: str,
    source: str,
    impl: str,
    collective: str,
    size_bytes: int,
    time_us: float,
    nranks: int | None,
    dtype: str | None,
    context: Mapping,
    where: str,
    extra: Mapping,
    time_reduction: str,
    min_max_us: tuple[float, float] | None = None,
    inplace: bool = False,
) -> dict:
    factor = busbw_factor(collective, nranks) if nranks and collective != "sendrecv" else None
    algbw = algbw_GBps(size_bytes, time_us)
    return {
        **({"inplace": int(inplace)} if collective in IN_PLACE else {}),
        **{k: v for k, v in context.items() if v is not None},
        "nranks": nranks,
        "backend": context.get("backend"),
        "collective": collective,
        "impl": impl,
        "dtype": dtype,
        "size_bytes": size_bytes,
        "metric_bytes": size_bytes,
        "time_us": time_us,
        "time_us_avg": time_us,
        "time_us_min": min_max_us[0] if min_max_us else None,
        "time_us_max": min_max_us[1] if min_max_us else None,
        "time_reduction": time_reduction,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor if factor is not None else None,
        "busbw_factor": factor,
        "modelled": False,
        "source": source,
        "info": {"tool": tool, "imported_from": where, **extra},
    }


#: ``name`` in rccl-tests' JSON lines -> binary.
JSON_NAMES = {
    "AllReduce": "all_reduce_perf",
    "AllGather": "all_gather_perf",
    "ReduceScatter": "reduce_scatter_perf",
    "Broadcast": "broadcast_perf",
    "AllToAll": "alltoall_perf",
    "SendRecv": "sendrecv_perf",
}


def parse_tests_json(text: str, path: str, context: Mapping, tool: str) -> list[dict]:
    """rccl-tests' ``--output_file F`` JSON lines (``-Z json``): the out-of-place rows."""
    out = []
    for lineno, line in _lines(text):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
            binary = JSON_NAMES[row["name"]]
            size, time_us, in_place = int(row["size"]), float(row["time"]), int(row["inPlace"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{where}: not a {tool} JSON result line ({type(exc).__name__}: {exc}); "
                "truncated output?"
            ) from None
        if in_place:
            continue
        nranks = context.get("nranks") or row.get("ranks") or row.get("gpus")
        ctx = {k: v for k, v in context.items() if k not in ("nranks", "binary")}
        extra = {"count": row.get("count")}
        if str(row.get("#wrong", "")).isdigit():
            extra["nwrong"] = int(row["#wrong"])
        out.append(
            _record(
                tool=tool,
                source=f"{tool} {binary} (JSON output file)",
                impl=f"{tool}:{binary.removesuffix('_perf')}",
                collective=NCCL_TESTS_BINARIES[binary],
                size_bytes=size,
                time_us=time_us,
                nranks=int(nranks) if nranks else None,
                dtype=NCCL_TESTS_TYPES.get(row.get("type"), row.get("type")),
                context=ctx,
                where=where,
                extra=extra,
                time_reduction="avg",
            )
        )
    if not out:
        raise ValueError(f"{path}:1: no out-of-place result line in this {tool} JSON file")
    return out


def _is_json_lines(text: str) -> bool:
    """rccl-tests' JSON lines (one result object per line, with ``name`` and ``inPlace``)
    rather than nccl-tests' one ``-J`` document."""
    first = text.lstrip().split("\n", 1)[0]
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and "name" in row and "inPlace" in row


#: nccl-tests' ``-a``: how the printed time combines the ranks' times
_AVERAGE = {"0": "rank0", "1": "avg", "2": "min", "3": "max"}


def _results_lines(text: str) -> list[int]:
    """The line on which each element of the document's ``results`` list starts (a ``-J``
    file is one line; a pretty-printed one has many): ``raw_decode`` walks the list."""
    m = re.search(r'"results"\s*:\s*\[', text)
    if m is None:
        return []
    decoder, pos, lines = json.JSONDecoder(), m.end(), []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return lines
        lines.append(text.count("\n", 0, pos) + 1)
        try:
            _, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return lines


def _nccl_version(code) -> str | None:
    """``ncclGetVersion``'s code as text: 22903 -> 2.29.3 (2.9 and later), 2708 -> 2.7.8."""
    if not isinstance(code, int) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def parse_tests_document(text: str, path: str, context: Mapping, tool: str) -> list[dict]:
    """nccl-tests' ``-J FILE`` (src/util.cu's writer; rccl-tests writes it too since its
    2.17 sync): one JSON object with the run's ``args``, ``config`` (and its ``devices``)
    and one ``results`` row per size, each with ``out_of_place`` and ``in_place`` times
    and, with ``-I 1``, ``*_per_iter`` statistics and times.

    One record per size and placement (``inplace`` 0/1; the in-place half only for the
    collectives commbench runs in place). Per-iteration times go to the raw side file
    (:data:`RAW_KEY`): ``samples_us`` holds one row per process (``per_process_max_times_us``,
    each process's slowest GPU per iteration) when the run had several processes, else
    the one row of ``times_us``; the record's ``rank_time_us`` are the rows' means.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}:{exc.lineno}: not a whole {tool} JSON file ({exc.msg} at column "
            f"{exc.colno}): a run killed while writing it leaves it cut off; import its "
            "printed table instead"
        ) from None
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path}:1: a {tool} -J file holds one JSON object, not {type(doc).__name__}"
        )
    errors = [e for e in doc.get("errors") or [] if isinstance(e, str) and e.strip()]
    if errors:
        raise ValueError(f"{path}:1: {tool} reported an error: {errors[0].strip()}")
    results = doc.get("results")
    if not isinstance(results, list) or not results:
        raise ValueError(
            f"{path}:1: no results in this {tool} JSON file (the run stopped before its "
            "first size?)"
        )
    if (doc.get("out_of_bounds") or {}).get("okay") == "false":
        count = doc["out_of_bounds"].get("count")
        raise ValueError(f"{path}:1: {tool} reported {count} wrong result(s) (out_of_bounds)")
    args = [str(a) for a in doc.get("args") or []]
    binary = context.get("binary") or (args[0].rsplit("/", 1)[-1] if args else None)
    if binary not in NCCL_TESTS_BINARIES:
        raise ValueError(
            f"{path}:1: {tool} binary {binary!r} is not one commbench imports "
            f"({', '.join(NCCL_TESTS_BINARIES)}): give --binary"
        )
    coll = NCCL_TESTS_BINARIES[binary]
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    per_proc = int(config.get("nthreads") or 1) * int(config.get("ngpus") or 1)
    nranks = context.get("nranks") or (len(devices) * per_proc if devices else None)
    average = "1"
    for flag in ("-a", "--average"):
        if flag in args[:-1]:
            average = args[args.index(flag) + 1]
    version = _nccl_version(doc.get("nccl_version"))
    source = f"{tool} {binary} (-J JSON" + (f", NCCL {version})" if version else ")")
    ctx = {k: v for k, v in context.items() if k not in ("nranks", "binary")}
    ctx["run_id"] = context.get("run_id") or f"{tool}-{doc.get('start_time', 'unknown')}"
    if not ctx.get("nodes") and not ctx.get("gpus_per_node"):
        ctx["nodes"], ctx["gpus_per_node"] = _device_layout(devices)
    hosts = sorted({str(d["hostname"]) for d in devices if d.get("hostname")})
    lines = _results_lines(text)
    out = []
    for index, row in enumerate(results):
        where = f"{path}:{lines[index] if index < len(lines) else 1}"
        what = f"results[{index}]"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: {what} is not an object (a {tool} result row)")
        size = row.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"{where}: {what}.size {size!r} is not a size in bytes")
        for placement in ("out_of_place", "in_place"):
            body = row.get(placement)
            inplace = placement == "in_place"
            if body is None or (inplace and coll not in IN_PLACE):
                continue  # not run (trace replays have no out-of-place half), or N/A
            rec = _document_record(
                body, row.get(f"{placement}_per_iter"), f"{what}.{placement}", where,
                tool=tool, source=source, binary=binary, coll=coll, nranks=nranks, ctx=ctx,
                size=size, inplace=inplace, time_reduction=_AVERAGE.get(average, "avg"),
                dtype=NCCL_TESTS_TYPES.get(row.get("type"), row.get("type")),
                count=row.get("count"),
            )  # fmt: skip
            rec.update(point=index, hostnames=hosts or None)
            if rec.get(RAW_KEY):
                rec[RAW_KEY].update(run_id=ctx["run_id"], launch_id=ctx.get("launch_id"),
                                    point=index, size_bytes=size)  # fmt: skip
            out.append(rec)
    return out


def _device_layout(devices: list[dict]) -> tuple[int | None, int | None]:
    """``(nodes, GPUs per node)`` from a ``-J`` file's devices when their hosts hold equal
    runs of consecutive ranks (rank ``r`` on node ``r // GPUs per node``, as commbench
    places them), else ``(None, None)``."""
    try:
        hosts = [str(d["hostname"]) for d in sorted(devices, key=lambda d: int(d["rank"]))]
    except (KeyError, TypeError, ValueError):
        return None, None
    runs = [h for i, h in enumerate(hosts) if i == 0 or h != hosts[i - 1]]
    if not hosts or len(set(runs)) != len(runs) or len(hosts) % len(runs):
        return None, None
    gpn = len(hosts) // len(runs)
    if any(hosts[i] != hosts[i - i % gpn] for i in range(len(hosts))):
        return None, None
    return len(runs), gpn


def _finite(value, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: {what} {value!r} is not a number (truncated or garbled file?)")
    return float(value)


def _document_record(body, per_iter, what, where, *, tool, source, binary, coll, nranks, ctx,
                     size, inplace, time_reduction, dtype, count) -> dict:  # fmt: skip
    """One record of :func:`parse_tests_document` (``body``: one ``out_of_place`` or
    ``in_place`` object; ``per_iter``: its ``*_per_iter`` object or None)."""
    if not isinstance(body, dict):
        raise ValueError(f"{where}: {what} is not an object")
    time_us = _finite(body.get("time", body.get("cpu_time")), where, f"{what}.time")
    extra: dict = {"count": count}
    wrong = body.get("nwrong")
    if wrong is not None:
        extra["nwrong"] = int(_finite(wrong, where, f"{what}.nwrong"))
    raw = None
    rows: list[list[float]] = []
    if per_iter is not None:
        if not isinstance(per_iter, dict):
            raise ValueError(f"{where}: {what}_per_iter is not an object")
        times = per_iter.get("times_us")
        by_proc = per_iter.get("per_process_max_times_us")
        for name, table in (("times_us", [times]), ("per_process_max_times_us", by_proc or [])):
            if name == "times_us" and times is None:
                continue
            if not isinstance(table, list) or not all(isinstance(r, list) for r in table):
                raise ValueError(f"{where}: {what}_per_iter.{name} is not a list of times")
            for r in table:
                for i, t in enumerate(r):
                    _finite(t, where, f"{what}_per_iter.{name}[{i}]")
        rows = by_proc or ([times] if times else [])
        raw = {
            "inplace": int(inplace),
            "timing_mode": "per-iteration",
            "rows": "process" if by_proc else "max over processes",
            "skipped_iterations": per_iter.get("skipped_iterations"),
            "samples_us": rows,
            "rank_time_us": [sum(r) / len(r) for r in rows if r],
        }
        extra["per_iter"] = {k: per_iter[k] for k in ("min_us", "max_us", "p50_us", "p95_us",
                                                      "p99_us", "stdev_us", "cv_pct")
                             if k in per_iter}  # fmt: skip
    rank_means = raw["rank_time_us"] if raw and len(rows) > 1 else None
    rec = _record(
        tool=tool,
        source=source,
        impl=f"{tool}:{binary.removesuffix('_perf')}",
        collective=coll,
        size_bytes=size,
        time_us=time_us,
        nranks=nranks,
        dtype=dtype,
        context=ctx,
        where=where,
        extra=extra,
        time_reduction=time_reduction,
        min_max_us=(min(rank_means), max(rank_means)) if rank_means else None,
        inplace=inplace,
    )
    if per_iter is not None:
        rec["time_us_p50"] = per_iter.get("p50_us")
        rec["time_us_p99"] = per_iter.get("p99_us")
    if rank_means:
        rec["rank_time_us"] = rank_means
    rec[RAW_KEY] = raw
    return rec


def parse_nccl_tests(
    text: str, path: str, context: Mapping, tool: str = "nccl-tests"
) -> list[dict]:
    """nccl-tests / rccl-tests text output -> records (out-of-place time; in-place in ``info``).

    The table's columns are ``size count type [redop] [root] time algbw busbw wrong`` twice;
    only rank 0 prints it. A second table header after rows, a row that goes back in size,
    a short or non-numeric row, or a failure line is an error naming ``path:line``.
    """
    binary = None
    version = None
    ranks: set[int] = set()
    rows: list[dict] = []
    header_line = None
    last = 0
    for lineno, line in _lines(text):
        last = lineno
        where = f"{path}:{lineno}"
        if _NCCL_FAIL_RE.search(line):
            raise ValueError(f"{where}: {tool} reported a failure: {line.strip()}")
        m = _NCCL_VERSION_RE.search(line)
        if m and version is None:
            version = m.group(1) or m.group(2)
            continue
        m = _RANK_RE.match(line)
        if m:
            ranks.add(int(m.group(1)))
            continue
        if _NCCL_HEADER_RE.match(line):
            if rows:
                raise ValueError(
                    f"{where}: a second result table after {len(rows)} row(s): interleaved "
                    "output of several runs; import one run per file"
                )
            header_line = lineno
            continue
        if header_line is None or not line.strip():
            m = _NCCL_BINARY_RE.search(line)
            if m and binary is None:
                binary = m.group(1)
            continue
        if line.lstrip().startswith("#"):
            continue
        tokens = line.split()
        if len(tokens) < 11:
            raise ValueError(
                f"{where}: a {tool} row needs size, count, type and 8 timing columns, got "
                f"{len(tokens)} field(s) (truncated output?)"
            )
        size = int(_number(tokens[0], where, "size"))
        count = int(_number(tokens[1], where, "count"))
        out_t, in_t = tokens[-8:-4], tokens[-4:]
        time_oop = _number(out_t[0], where, "out-of-place time")
        time_ip = _number(in_t[0], where, "in-place time")
        if rows and size <= rows[-1]["size"]:
            raise ValueError(
                f"{where}: size {size} after {rows[-1]['size']}: rows out of order "
                "(interleaved output of several ranks or runs?)"
            )
        redop = tokens[3] if len(tokens) > 11 else ""
        rows.append(
            {
                "size": size,
                "count": count,
                "dtype": NCCL_TESTS_TYPES.get(tokens[2], tokens[2]),
                "time": time_oop,
                "in_place_us": time_ip,
                "wrong": out_t[3],
                "reduces": redop in _REDUCTION_OPS,
                "where": where,
            }
        )
    if not rows:
        what = "a table header but no rows" if header_line else "no result table"
        raise ValueError(f"{path}:{last}: {what}: not (complete) {tool} output")
    # The binary: as given, else as the output names it, else by the redop column
    # (a reduction: all_reduce_perf; none: alltoall_perf).
    binary = context.get("binary") or binary
    if binary is None:
        binary = "all_reduce_perf" if rows[0]["reduces"] else "alltoall_perf"
    if binary not in NCCL_TESTS_BINARIES:
        raise ValueError(f"{tool} binary {binary!r}: choose {', '.join(NCCL_TESTS_BINARIES)}")
    coll = NCCL_TESTS_BINARIES[binary]
    impl_name = binary.removesuffix("_perf")
    nranks = context.get("nranks") or (len(ranks) or None)
    source = f"{tool} {binary}" + (f" (NCCL {version})" if version else "")
    ctx = {k: v for k, v in context.items() if k not in ("nranks", "binary")}
    out = []
    for row in rows:
        wrong = row["wrong"]
        extra = {"in_place_us": row["in_place_us"], "count": row["count"]}
        if wrong.isdigit():
            extra["nwrong"] = int(wrong)
        out.append(
            _record(
                tool=tool,
                source=source,
                impl=f"{tool}:{impl_name}",
                collective=coll,
                size_bytes=row["size"],
                time_us=row["time"],
                nranks=nranks,
                dtype=row["dtype"],
                context=ctx,
                where=row["where"],
                extra=extra,
                time_reduction="avg",
            )
        )
    return out


def _osu_binary(title: str) -> str | None:
    t = title.lower()
    if "allreduce" in t:
        return "osu_allreduce"
    if t.startswith("allgather latency"):
        return "osu_allgather"
    if t.startswith("reduce_scatter latency"):
        return "osu_reduce_scatter"
    if t.startswith("broadcast latency") or t.startswith("bcast latency"):
        return "osu_bcast"
    if "all-to-allv" in t or "alltoallv" in t:
        return "osu_alltoallv"
    if "all-to-all" in t or "alltoall" in t:
        return "osu_alltoall"
    if t.strip() == "latency":
        return "osu_latency"
    return None


def parse_osu(text: str, path: str, context: Mapping) -> list[dict]:
    """OSU micro-benchmark text output -> records (``Avg Latency(us)``, or ``Latency (us)``).

    OSU's size is per message: an all-to-all record's ``size_bytes`` is that times the
    number of ranks (commbench's and nccl-tests' per-rank buffer), so ``nranks`` is needed.
    """
    title = version = device = dtype = None
    header_line = None
    rows: list[tuple[int, float, dict, str]] = []
    last = 0
    for lineno, line in _lines(text):
        last = lineno
        where = f"{path}:{lineno}"
        m = _OSU_TITLE_RE.match(line)
        if m:
            if rows:
                raise ValueError(
                    f"{where}: a second OSU header after {len(rows)} row(s): interleaved "
                    "output of several runs; import one run per file"
                )
            device, title, version = m.group(1), m.group(2), m.group(3)
            continue
        m = _OSU_DATATYPE_RE.match(line)
        if m:
            dtype = OSU_TYPES.get(m.group(1))
            continue
        if line.startswith("# Size"):
            header_line = lineno
            cols = re.split(r"\s{2,}", line[1:].strip())
            continue
        if not line.strip() or line.startswith("#"):
            continue
        if header_line is None:
            if title and _OSU_FAIL_RE.search(line):
                raise ValueError(f"{where}: OSU reported a failure: {line.strip()}")
            continue
        tokens = line.split()
        if not tokens[0].isdigit():
            if _OSU_FAIL_RE.search(line):
                raise ValueError(f"{where}: OSU reported a failure: {line.strip()}")
            raise ValueError(f"{where}: not an OSU result row: {line.strip()!r}")
        if len(tokens) != len(cols):
            raise ValueError(
                f"{where}: an OSU row has {len(cols)} column(s) ({', '.join(cols)}), got "
                f"{len(tokens)} (truncated or interleaved output?)"
            )
        size = int(tokens[0])
        if rows and size <= rows[-1][0]:
            raise ValueError(f"{where}: size {size} after {rows[-1][0]}: rows out of order")
        values = {c: _number(v, where, c) for c, v in zip(cols[1:], tokens[1:], strict=True)}
        rows.append((size, values[cols[1]], values, where))
    if title is None:
        raise ValueError(f"{path}:{last}: no '# OSU MPI ... Test vX' line: not OSU output")
    if not rows:
        raise ValueError(f"{path}:{last}: an OSU header but no result rows (truncated output?)")
    binary = _osu_binary(title) or context.get("binary")
    if binary not in OSU_BINARIES:
        raise ValueError(
            f"{path}:1: OSU test {title!r} is not one commbench imports ({', '.join(OSU_BINARIES)})"
        )
    coll = OSU_BINARIES[binary]
    nranks = context.get("nranks")
    if coll == "sendrecv":
        nranks = 2  # osu_latency is a ping-pong between two ranks whatever the job has
    if coll in OSU_PER_PEER and not nranks:
        raise ValueError(f"{path}: {binary} sizes are per peer: give --nranks N (the job's ranks)")
    ctx = {k: v for k, v in context.items() if k not in ("nranks", "binary")}
    source = f"osu {binary} v{version}" + (f" ({device.upper()})" if device else "")
    out = []
    for size, avg, values, where in rows:
        size_bytes = size * nranks if coll in OSU_PER_PEER else size
        extra = {"osu_size": size, **{_slug_col(c): v for c, v in values.items()}}
        low, high = values.get("Min Latency(us)"), values.get("Max Latency(us)")
        out.append(
            _record(
                tool="osu",
                source=source,
                impl=f"osu:{binary}",
                collective=coll,
                size_bytes=size_bytes,
                time_us=avg,
                nranks=nranks,
                dtype=dtype,
                context=ctx,
                where=where,
                extra=extra,
                time_reduction="avg",
                min_max_us=(low, high) if low is not None and high is not None else None,
            )
        )
    return out


def _slug_col(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def parse_output(tool: str, text: str, path: str, context: Mapping) -> list[dict]:
    if tool == "osu":
        return parse_osu(text, path, context)
    if tool in ("nccl-tests", "rccl-tests"):
        if text.lstrip().startswith("{"):
            if _is_json_lines(text):
                return parse_tests_json(text, path, context, tool)
            return parse_tests_document(text, path, context, tool)
        return parse_nccl_tests(text, path, context, tool)
    raise ValueError(f"unknown tool {tool!r}: choose {', '.join(TOOLS)}")


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
