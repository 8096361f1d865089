"""External baselines: nccl-tests / rccl-tests and the OSU micro-benchmarks.

Two halves, both pure: what a job runs (:func:`external_command`: the binary for a step's
collective and its flags, from the same sizes, dtype and iterations as the commbench step)
and what comes back (:func:`parse_nccl_tests`, :func:`parse_osu`: their text output into
commbench point records, ``impl`` = ``nccl-tests:all_reduce``, ``osu:osu_allreduce``, ...).
A line that cannot be read is a ``ValueError`` naming ``FILE:LINE``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

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
    "alltoall_perf": "alltoall",
    "sendrecv_perf": "sendrecv",
}
OSU_BINARIES = {
    "osu_allreduce": "allreduce",
    "osu_alltoall": "alltoall",
    "osu_alltoallv": "alltoallv",
    "osu_latency": "sendrecv",
}
#: The binary a tool runs for a commbench collective (absent: the tool has none).
BINARY_FOR = {
    "nccl-tests": {"allreduce": "all_reduce_perf", "alltoall": "alltoall_perf"},
    "rccl-tests": {"allreduce": "all_reduce_perf", "alltoall": "alltoall_perf"},
    "osu": {"allreduce": "osu_allreduce", "alltoall": "osu_alltoall", "alltoallv": "osu_alltoallv"},
}
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
_NCCL_BINARY_RE = re.compile(r"\b(all_reduce_perf|alltoall_perf|sendrecv_perf)\b")
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
) -> dict:
    factor = busbw_factor(collective, nranks) if nranks and collective != "sendrecv" else None
    algbw = algbw_GBps(size_bytes, time_us)
    return {
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
    if coll in ("alltoall", "alltoallv") and not nranks:
        raise ValueError(f"{path}: {binary} sizes are per peer: give --nranks N (the job's ranks)")
    ctx = {k: v for k, v in context.items() if k not in ("nranks", "binary")}
    source = f"osu {binary} v{version}" + (f" ({device.upper()})" if device else "")
    out = []
    for size, avg, values, where in rows:
        size_bytes = size * nranks if coll in ("alltoall", "alltoallv") else size
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
            return parse_tests_json(text, path, context, tool)
        return parse_nccl_tests(text, path, context, tool)
    raise ValueError(f"unknown tool {tool!r}: choose {', '.join(TOOLS)}")


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
