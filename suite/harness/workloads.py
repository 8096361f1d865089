"""Traffic generators for all-to-allv: seeded P x P byte matrices (row = sender).

A workload is named by a spec string::

    uniform | random | zipf[:S] | pair-zipf[:S] | expert-zipf[:S] | hotspot[:H]
    | perm-sum[:K] | moe:E,K
    | file:PATH | trace:PATH[,hidden=H][,dtype=D][,ranks=N][,fold=N]

each optionally followed by ``@SEED``. :func:`generate` turns a spec into an ``int64``
matrix ``D`` with ``D[u, v]`` = bytes rank u sends to rank v; the diagonal (self traffic)
is part of the all-to-allv and is included.

**Scaling rule** (every synthetic law and ``trace`` without ``hidden=``): the law gives
non-negative weights ``W``; the matrix holds ``N = floor(P * size / unit)`` units of
``unit`` bytes, apportioned to the entries in proportion to ``W`` by the largest-remainder
method (ties broken along cyclic diagonals ``(v - u) mod P``, then by ``u``, so leftover
units spread evenly over rows and columns). Hence every entry is a multiple of ``unit`` and
``sum(D) / P == size`` exactly whenever ``P * size`` is a multiple of ``unit`` (otherwise
it is short by less than ``unit / P``). ``perm-sum`` instead keeps every row and column
sum equal to ``unit * floor(size / unit)``.

Laws:

- ``uniform``: equal weights (entries equal when ``size`` is a multiple of ``P * unit``).
- ``random``: i.i.d. uniform weights in [0, 1).
- ``pair-zipf:S`` (also spelled ``zipf:S``; default S = 0.8): skewed by *pair*. The P^2
  pairs get rank-frequency Zipf weights ``1 / k**S``, k = 1 .. P^2, in a random order
  (finite Zipf, so any S >= 0 works; the papers use S in [0.1, 0.99]). At 32 ranks and
  S = 0.8 the top pair alone carries about 6 % of all bytes.
- ``expert-zipf:S`` (default S = 0.8): skewed by *destination*, as MoE dispatch is (the
  receiving rank hosts the hot experts). The P destinations get Zipf weights ``1 / k**S``,
  k = 1 .. P, in a random order; every sender splits its bytes over the destinations in
  proportion to them, jittered per pair by uniform [0.75, 1.25) (routers differ a little
  per rank). Rows are roughly equal, columns are skewed.
- ``hotspot:H`` (default ``max(1, P // 8)``): H random hot destination ranks receive half
  of every sender's bytes; the other half spreads over the rest; weights jittered by
  uniform [0.5, 1.5).
- ``perm-sum:K`` (default 4): sum of K random permutation matrices with random integer
  weights (balanced rows and columns, as rccl-tests generates).
- ``moe:E,K``: gated MoE dispatch. E experts placed round-robin on ranks (expert e on
  rank ``e mod P``), a skewed global expert popularity (Dirichlet(1)) perturbed per rank
  (log-normal, sigma 0.5); each rank routes 4096 tokens to K distinct experts drawn in
  proportion to its gate (sequential sampling without replacement, which is the law of a
  top-k over Gumbel-perturbed logits), token counts then scaled by the rule above.
- ``file:PATH``: a matrix written by :func:`write_matrix` (the nccl-tests
  ``alltoallv_perf`` format), read back exactly; ``size`` is ignored and every entry must
  already be a multiple of ``unit``.
- ``trace:PATH`` or ``trace:NAME`` of a shipped trace (:data:`SHIPPED_TRACES`,
  ``trace:moe-megatron-4x8``): the routing trace format of :data:`MEGATRON_TRACE` (one integer per
  line, each ``N*N`` integers one N x N token matrix, row = sender; ``.gz`` is read as gzip).
  ``index`` picks matrix ``index mod count`` (``commbench workload --index``); ``run`` and
  ``simulate`` use matrix 0 for every call of a point, so measured and modelled agree. The
  native rank count N comes from ``ranks=N``, else from an ``SxG`` pattern in the file
  name (``4x8`` -> 32), else it is taken to be ``nranks``; it must equal ``nranks``, and
  ``ranks=N`` must agree with the file name's pattern when there is one. ``fold=N``
  sums the native ranks in N groups of consecutive ranks (N divides the native count;
  the run then has N ranks): ``trace:moe-megatron-4x8,fold=8`` makes each rank carry 4
  GPUs' traffic, each of the trace's 4 servers 2 ranks, traffic inside a group becoming
  that rank's own (the diagonal), so a small cluster replays the trace's skew.
  Without ``hidden=`` the token counts are weights scaled to ``size`` by the rule above;
  with ``hidden=H`` (and ``dtype=D`` bytes per element, default 2 = bf16) the bytes are
  the real ones, ``tokens * H * D`` (rounded up to a multiple of ``unit``), and ``size``
  is ignored.

Seeds: ``@SEED`` in the spec wins over the ``seed`` argument, which defaults to
:data:`DEFAULT_SEED` (1) in every command (``run``, ``simulate``, ``workload``,
``schedule``), so a spec alone always names the same matrix.

A matrix needs about :data:`WORK_BYTES_PER_ENTRY` bytes of working memory per entry while
it is made; :func:`generate` refuses up front what would not fit in the memory available.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import numpy as np

from commbench.errors import UsageError

DEFAULT_SEED = 1
#: The Megatron-LM routing trace shipped with commbench (32 ranks, 600 matrices; see
#: ``suite/harness/data/README.md`` for its source and licence).
MEGATRON_TRACE = Path(str(files("commbench.harness"))) / "data" / "moe-megatron-4x8.txt.gz"
#: Traces shipped with commbench, by the name ``trace:NAME`` takes instead of a path.
SHIPPED_TRACES = {"moe-megatron-4x8": MEGATRON_TRACE}
#: Peak bytes per matrix entry while a law is generated (float weights, a permutation,
#: apportion's remainders, indices and sort order; measured peak about 70).
WORK_BYTES_PER_ENTRY = 96
MOE_TOKENS_PER_RANK = 4096
KINDS = (
    "uniform",
    "random",
    "zipf",
    "pair-zipf",
    "expert-zipf",
    "hotspot",
    "perm-sum",
    "moe",
    "file",
    "trace",
)
#: the Zipf laws: the exponent is a float
_ZIPF = ("zipf", "pair-zipf", "expert-zipf")
_NO_ARGS = ("uniform", "random")
_SCALAR = (*_ZIPF, "hotspot", "perm-sum")
_HELP = (
    "uniform, random, zipf[:S] (= pair-zipf[:S]), expert-zipf[:S], hotspot[:H], "
    "perm-sum[:K], moe:E,K, file:PATH or "
    "trace:PATH[,hidden=H,dtype=D,ranks=N,fold=N], optionally followed by @SEED"
)


@dataclass(frozen=True)
class Workload:
    """A parsed, validated workload spec."""

    kind: str
    args: tuple = ()
    options: dict = field(default_factory=dict, hash=False, compare=True)
    seed: int | None = None
    text: str = ""


def parse_workload(spec: str) -> Workload:
    """Parse and validate one workload spec; :class:`UsageError` on a malformed one."""
    text = str(spec).strip()
    body, seed = _split_seed(text)
    kind, _, rest = body.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise UsageError(f"unknown workload {text!r}: use {_HELP}")
    if kind in _NO_ARGS:
        if rest:
            raise UsageError(f"workload {kind!r} takes no parameter (got {text!r})")
        return Workload(kind, (), {}, seed, text)
    if kind in _SCALAR:
        return Workload(kind, _parse_scalar(kind, rest, text), {}, seed, text)
    if kind == "moe":
        parts = [p.strip() for p in rest.split(",")] if rest else []
        if len(parts) != 2:
            raise UsageError(f"workload {text!r}: moe needs E,K (experts, top-k), e.g. moe:64,6")
        e, k = (_int(p, f"moe parameter in {text!r}") for p in parts)
        if e < 1 or not 1 <= k <= e:
            raise UsageError(f"workload {text!r}: need E >= 1 experts and 1 <= K <= E")
        return Workload(kind, (e, k), {}, seed, text)
    if kind == "file":
        if not rest:
            raise UsageError(f"workload {text!r}: give a matrix file, e.g. file:traffic.txt")
        return Workload(kind, (rest,), {}, seed, text)
    # trace
    path, *opts = rest.split(",")
    if not path:
        raise UsageError(
            f"workload {text!r}: give a trace file or a shipped trace, e.g. trace:moe-megatron-4x8"
        )
    options: dict = {}
    for opt in opts:
        key, eq, value = opt.partition("=")
        key = key.strip()
        if not eq or key not in ("hidden", "dtype", "ranks", "fold"):
            raise UsageError(
                f"workload {text!r}: trace options are hidden=H, dtype=D (bytes), ranks=N "
                "and fold=N"
            )
        options[key] = _int(value, f"trace option {key} in {text!r}")
        if options[key] < 1:
            raise UsageError(f"workload {text!r}: {key} must be a positive integer")
    if "dtype" in options and "hidden" not in options:
        raise UsageError(f"workload {text!r}: dtype= only makes sense with hidden=")
    if path in SHIPPED_TRACES:
        path = str(SHIPPED_TRACES[path])
    w = Workload(kind, (path,), options, seed, text)
    if "fold" in options:
        native = _native_ranks(w)
        if native is None:
            raise UsageError(
                f"workload {text!r}: fold= needs the trace's own rank count: add ranks=N"
            )
        if native % options["fold"]:
            raise UsageError(
                f"workload {text!r}: fold={options['fold']} must divide the trace's {native} ranks"
            )
    return w


def expand_workloads(spec: str) -> list[str]:
    """Turn a list-valued spec into one spec per value.

    ``zipf:0.1,0.5,0.8`` -> ``["zipf:0.1", "zipf:0.5", "zipf:0.8"]``; ``moe`` takes its
    values in pairs (``moe:8,2,64,6`` -> ``moe:8,2`` and ``moe:64,6``); ``file`` and
    ``trace`` are never split (a trace's commas are options). A trailing ``@SEED`` is
    kept on every spec. Each result is validated with :func:`parse_workload`.
    """
    text = str(spec).strip()
    body, seed = _split_seed(text)
    suffix = "" if seed is None else f"@{seed}"
    kind, colon, rest = body.partition(":")
    kind = kind.strip().lower()
    if kind in _SCALAR and "," in rest:
        out = [f"{kind}:{v.strip()}{suffix}" for v in rest.split(",")]
    elif kind == "moe" and rest.count(",") > 1:
        vals = [v.strip() for v in rest.split(",")]
        if len(vals) % 2:
            raise UsageError(f"workload {text!r}: moe values come in E,K pairs")
        out = [f"moe:{vals[i]},{vals[i + 1]}{suffix}" for i in range(0, len(vals), 2)]
    else:
        out = [text]
    for s in out:
        parse_workload(s)
    return out


def generate(
    spec: str | Workload,
    nranks: int,
    size: int,
    seed: int | None = None,
    unit: int = 1,
    index: int = 0,
) -> np.ndarray:
    """The ``nranks x nranks`` int64 byte matrix of ``spec`` (see the module docstring)."""
    w = spec if isinstance(spec, Workload) else parse_workload(spec)
    nranks, size, unit = int(nranks), int(size), int(unit)
    if nranks < 1:
        raise UsageError(f"need at least one rank (got {nranks})")
    if size < 0:
        raise UsageError(f"size must not be negative (got {size})")
    if unit < 1:
        raise UsageError(f"alignment unit must be a positive number of bytes (got {unit})")
    check_memory(nranks, f"a {nranks}x{nranks} traffic matrix", WORK_BYTES_PER_ENTRY)
    rng = np.random.default_rng(w.seed if w.seed is not None else _seed(seed))
    p = nranks
    if w.kind == "uniform":
        return apportion(np.ones((p, p)), p * size // unit) * unit
    if w.kind == "random":
        return apportion(rng.random((p, p)), p * size // unit) * unit
    if w.kind in ("zipf", "pair-zipf"):
        s = w.args[0] if w.args else 0.8
        ranks = rng.permutation(p * p).reshape(p, p) + 1.0
        return apportion(ranks**-s, p * size // unit) * unit
    if w.kind == "expert-zipf":
        s = w.args[0] if w.args else 0.8
        popularity = (rng.permutation(p) + 1.0) ** -s
        weights = popularity[None, :] * rng.uniform(0.75, 1.25, size=(p, p))
        return apportion(weights, p * size // unit) * unit
    if w.kind == "hotspot":
        return apportion(_hotspot(rng, p, w.args[0] if w.args else None), p * size // unit) * unit
    if w.kind == "perm-sum":
        return _perm_sum(rng, p, w.args[0] if w.args else 4, size // unit) * unit
    if w.kind == "moe":
        return apportion(_moe_tokens(rng, p, *w.args), p * size // unit) * unit
    if w.kind == "file":
        m = read_matrix(w.args[0])
        if m.shape != (p, p):
            raise UsageError(
                f"{w.args[0]}: matrix is {m.shape[0]}x{m.shape[1]} but the run has {p} ranks"
            )
        _check_unit(m, w.args[0], unit)
        return m
    return _trace(w, p, size, unit, index)


def check_local_inputs(spec: str, unit: int = 1) -> None:
    """Check a ``file:`` or ``trace:`` workload's file now, when it is readable here (before
    MPI starts); the rank count is checked later, when it is known."""
    w = parse_workload(spec)
    path = w.args[0] if w.kind in ("file", "trace") else None
    if path is None or not os.path.isfile(path) or not os.access(path, os.R_OK):
        return
    if w.kind == "file":
        try:
            m = read_matrix(path)
        except ValueError as exc:
            raise UsageError(f"--workload {spec}: {exc}") from None
        _check_unit(m, path, unit)
        return
    native = _native_ranks(w)
    if native is not None:
        load_trace(str(Path(path).resolve()), native)


def check_memory(entries_side: int, what: str, bytes_per_entry: float) -> None:
    """``UsageError`` when ``entries_side**2 * bytes_per_entry`` exceeds available memory."""
    need = float(entries_side) ** 2 * bytes_per_entry
    have = available_memory()
    if have is not None and need > have:
        raise UsageError(
            f"{what} needs about {need / 2**30:.1f} GiB of memory while it is made, more than "
            f"the {have / 2**30:.1f} GiB available: use fewer ranks"
        )


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def apportion(weights: np.ndarray, units: int) -> np.ndarray:
    """Split ``units`` integer units over ``weights`` (largest remainder; see module doc)."""
    w = np.asarray(weights, dtype=np.float64)
    p = w.shape[0]
    out = np.zeros(w.shape, dtype=np.int64)
    total = w.sum()
    if units <= 0 or total <= 0:
        return out
    exact = w * (units / total)
    out[...] = np.floor(exact).astype(np.int64)
    # float rounding can push the floor sum a hair over or under: fix by the remainder
    left = units - int(out.sum())
    if left < 0:
        flat = out.reshape(-1)
        order = np.argsort(-flat, kind="stable")
        for idx in order[:-left]:
            flat[idx] -= 1
        return out
    frac = (exact - out).reshape(-1)
    u, v = np.indices(w.shape)
    diag = ((v - u) % p).reshape(-1)
    order = np.lexsort((u.reshape(-1), diag, -frac))
    flat = out.reshape(-1)
    while left > 0:  # at most one pass in practice; loops only if left > P*P
        take = order[: min(left, len(order))]
        flat[take] += 1
        left -= len(take)
    return out


def write_matrix(path, matrix: np.ndarray) -> None:
    """Write ``matrix`` in nccl-tests' ``alltoallv_perf`` format (one row per line) to a
    path or an open text file."""
    m = _as_byte_matrix(matrix, "matrix")
    text = "".join(" ".join(map(str, row)) + "\n" for row in m.tolist())
    if hasattr(path, "write"):
        path.write(text)
        return
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def read_matrix(path: str | os.PathLike) -> np.ndarray:
    """Read an ``alltoallv_perf`` matrix file; ``ValueError`` naming the file and line."""
    rows: list[list[int]] = []
    lines: list[int] = []
    with open(path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            row = []
            for col, tok in enumerate(fields):
                try:
                    val = int(tok)
                except ValueError:
                    raise ValueError(
                        f"{path}:{lineno}: field {col + 1} is {tok!r}, not an integer byte count"
                    ) from None
                if val < 0:
                    raise ValueError(f"{path}:{lineno}: field {col + 1} is negative ({val})")
                row.append(val)
            if rows and len(row) != len(rows[0]):
                raise ValueError(
                    f"{path}:{lineno}: row has {len(row)} entries, the first row has {len(rows[0])}"
                )
            rows.append(row)
            lines.append(lineno)
    if not rows:
        raise ValueError(f"{path}: empty matrix file")
    if len(rows) != len(rows[0]):
        raise ValueError(
            f"{path}: matrix must be square: {len(rows)} rows of {len(rows[0])} entries"
        )
    try:
        return np.array(rows, dtype=np.int64)
    except OverflowError:
        raise ValueError(f"{path}: an entry does not fit in 64 bits") from None


# ----------------------------------------------------------------------------- helpers


def _check_unit(m: np.ndarray, path: str, unit: int) -> None:
    bad = np.argwhere(m % unit)
    if len(bad):
        i, j = bad[0]
        raise UsageError(
            f"{path}: entry [{i}][{j}] = {m[i, j]} is not a multiple of the {unit}-byte unit"
        )


def _split_seed(text: str) -> tuple[str, int | None]:
    body, at, seed = text.rpartition("@")
    if not at:
        return text, None
    try:
        value = int(seed)
    except ValueError:
        raise UsageError(f"workload {text!r}: the seed after '@' must be an integer") from None
    if value < 0:
        raise UsageError(f"workload {text!r}: the seed must not be negative")
    return body, value


def _seed(seed: int | None) -> int:
    if seed is None:
        return DEFAULT_SEED
    if int(seed) < 0:
        raise UsageError(f"seed must not be negative (got {seed})")
    return int(seed)


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise UsageError(f"{what} must be an integer (got {text.strip()!r})") from None


def _parse_scalar(kind: str, rest: str, text: str) -> tuple:
    if not rest:
        return ()
    if kind in _ZIPF:
        try:
            s = float(rest)
        except ValueError:
            raise UsageError(f"workload {text!r}: zipf exponent must be a number") from None
        if not 0.0 <= s <= 5.0:
            raise UsageError(
                f"workload {text!r}: zipf exponent must be in [0, 5] (papers: 0.1-0.99)"
            )
        return (s,)
    value = _int(rest, f"{kind} parameter in {text!r}")
    if value < 1:
        raise UsageError(f"workload {text!r}: {kind} parameter must be a positive integer")
    return (value,)


def _hotspot(rng: np.random.Generator, p: int, hot: int | None) -> np.ndarray:
    h = max(1, p // 8) if hot is None else hot
    if h > p:
        raise UsageError(f"hotspot:{h} asks for more hot destinations than the {p} ranks")
    is_hot = np.zeros(p, dtype=bool)
    is_hot[rng.choice(p, size=h, replace=False)] = True
    share = np.where(is_hot, 0.5 / h, 0.5 / (p - h) if p > h else 0.0)
    if p == h:
        share[:] = 1.0 / p
    return share[None, :] * rng.uniform(0.5, 1.5, size=(p, p))


def _perm_sum(rng: np.random.Generator, p: int, k: int, row_units: int) -> np.ndarray:
    weights = apportion(rng.random(k)[None, :] + 0.5, row_units)[0]
    out = np.zeros((p, p), dtype=np.int64)
    rows = np.arange(p)
    for wk in weights:
        out[rows, rng.permutation(p)] += wk
    return out


def _moe_tokens(rng: np.random.Generator, p: int, experts: int, topk: int) -> np.ndarray:
    popularity = rng.dirichlet(np.ones(experts))
    gates = popularity[None, :] * np.exp(0.5 * rng.standard_normal((p, experts)))
    gates /= gates.sum(axis=1, keepdims=True)
    counts = np.zeros((p, experts), dtype=np.int64)
    for r in range(p):
        counts[r] = np.bincount(_route(rng, gates[r], topk).reshape(-1), minlength=experts)
    tokens = np.zeros((p, p), dtype=np.int64)
    np.add.at(tokens.T, np.arange(experts) % p, counts.T)
    return tokens.astype(np.float64)


def _route(rng: np.random.Generator, gate: np.ndarray, topk: int) -> np.ndarray:
    """K distinct experts per token, drawn in proportion to ``gate`` without replacement.

    Redrawing a repeated expert is conditioning on "not chosen yet", so each pick has
    the law of sequential sampling without replacement (that of top-k over Gumbel-
    perturbed log-gates) at O(tokens * K * log E) cost.
    """
    cdf = np.cumsum(gate)
    cdf /= cdf[-1]
    last = len(gate) - 1
    chosen = np.empty((MOE_TOKENS_PER_RANK, topk), dtype=np.int64)
    for k in range(topk):
        todo = np.arange(MOE_TOKENS_PER_RANK)
        while todo.size:
            pick = np.minimum(np.searchsorted(cdf, rng.random(todo.size), side="right"), last)
            chosen[todo, k] = pick
            dup = (chosen[todo, :k] == pick[:, None]).any(axis=1)
            todo = todo[dup]
    return chosen


def _trace(w: Workload, p: int, size: int, unit: int, index: int) -> np.ndarray:
    path = w.args[0]
    native = _native_ranks(w) or p
    fold = w.options.get("fold")
    if (fold or native) != p:
        hint = f"run it with {fold} ranks" if fold else (
            f"run it with {native} ranks, or fold it (fold=N, N dividing {native}; or say "
            "ranks=N if the file name misleads)")  # fmt: skip
        raise UsageError(
            f"trace {path} holds {native}-rank matrices"
            + (f" folded to {fold}" if fold else "")
            + f" but the run has {p} ranks: {hint}"
        )
    mats = load_trace(str(Path(path).resolve()), native)
    tokens = mats[int(index) % len(mats)]
    if fold:
        tokens = fold_ranks(tokens, fold)
    if "hidden" in w.options:
        per_token = w.options["hidden"] * w.options.get("dtype", 2)
        raw = tokens * per_token
        return -(-raw // unit) * unit
    return apportion(tokens.astype(np.float64), p * size // unit) * unit


def fold_ranks(m: np.ndarray, n: int) -> np.ndarray:
    """``m`` (square) summed in ``n`` groups of consecutive ranks: entry [i][j] is what
    group i sends to group j."""
    k = m.shape[0] // n
    return m.reshape(n, k, n, k).sum(axis=(1, 3))


def _native_ranks(w: Workload) -> int | None:
    """A trace's rank count from ``ranks=N`` or its file name; they must agree."""
    given, named = w.options.get("ranks"), _ranks_from_name(w.args[0])
    if given is not None and named is not None and given != named:
        raise UsageError(
            f"trace {w.args[0]}: ranks={given} but the file name says {named} ranks: "
            f"drop ranks= or rename the file if its name is wrong"
        )
    return given or named


def _ranks_from_name(path: str) -> int | None:
    m = re.search(r"(\d+)x(\d+)", Path(path).name)
    return int(m.group(1)) * int(m.group(2)) if m else None


@functools.lru_cache(maxsize=4)
def load_trace(path: str, n: int) -> np.ndarray:
    """The ``count x n x n`` token matrices of a trace file (gzip when it ends in ``.gz``),
    read-only and cached."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise UsageError(f"cannot read trace {path}: {why}") from None
    try:
        values = np.array(data.split(), dtype=np.int64)
    except ValueError:
        raise UsageError(f"trace {path}: holds something that is not an integer") from None
    if values.size == 0 or values.size % (n * n):
        raise UsageError(
            f"trace {path}: {values.size} integers is not a whole number of {n}x{n} matrices"
        )
    if (values < 0).any():
        raise UsageError(f"trace {path}: holds a negative token count")
    mats = values.reshape(-1, n, n)
    mats.setflags(write=False)
    return mats


def _as_byte_matrix(matrix: np.ndarray, what: str) -> np.ndarray:
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{what} must be square, got shape {m.shape}")
    if not np.issubdtype(m.dtype, np.integer):
        raise ValueError(f"{what} must hold integer byte counts, got dtype {m.dtype}")
    if (m < 0).any():
        i, j = np.argwhere(m < 0)[0]
        raise ValueError(f"{what}[{i}][{j}] is negative ({m[i, j]})")
    return m.astype(np.int64)
