"""Registry of collective implementations (the nccl-tests "plug-in" shape).

An implementation is a small class registered with :func:`register`. The harness
constructs it once per run with the transport, calls ``setup(case)`` outside the timed
region whenever the buffers or the traffic change, and ``run(case)`` for each timed call.
An optional ``info()`` returns extra fields for the result record (schedule synthesis
time, stage count, extra memory, ...). An optional ``native_call(case)`` returns a
:class:`commbench.kernels.native.Call` (or None) for the harness to time with the loop in
C, as the ``mpi`` implementations do: one library call, no Python per iteration. A class attribute ``PARAMS`` names the
``--param`` keys it takes (none by default); the driver refuses any other key up front.

What an implementation supports is data here, so the driver and the job renderer refuse
the same things with the same line (:func:`support_problem`): its backends, the element
types it takes on a GPU (``gpu_dtypes``), whether a call can be captured in a CUDA graph
(``capturable``: no host synchronisation or host-side work inside ``run``), the
environment it needs before the device is opened (``env``) and whether it needs a
power-of-two rank count (``pow2_ranks``).

Plug-ins are found by importing every module under :mod:`kernels` (see
:func:`load_plugins`), so adding an implementation means adding one module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: The collectives commbench measures (``commbench run COLLECTIVE``).
COLLECTIVES = ("allreduce", "alltoall", "alltoallv", "allgather", "reducescatter", "broadcast")
#: The transports an implementation runs on (``--backend``): numpy + MPI, CuPy + NCCL/RCCL.
BACKENDS = ("cpu", "cuda", "rocm")
GPU_BACKENDS = tuple(b for b in BACKENDS if b != "cpu")
#: Backends where CuPy can capture a stream into a graph (HIP graph capture is not in CuPy).
GRAPH_BACKENDS = ("cuda",)


@dataclass(frozen=True)
class ImplSpec:
    collective: str
    name: str
    factory: Callable
    backends: tuple[str, ...]
    summary: str
    #: the ``--param`` keys it takes (the class's ``PARAMS``)
    params: tuple[str, ...] = ()
    #: element types (``commbench.kernels.dtypes.dtype_name``) taken on cuda/rocm; None: all
    gpu_dtypes: tuple[str, ...] | None = None
    #: False when ``run`` synchronises with or works on the host (a graph would replay
    #: nothing, or the host work once)
    capturable: bool = True
    #: environment set before the device is opened (e.g. hardware queue count)
    env: Mapping[str, str] = field(default_factory=dict)
    #: runs on a power-of-two number of ranks only
    pow2_ranks: bool = False

    def support_problem(
        self, backend: str, dtype: str | None = None, graph: bool = False
    ) -> str | None:
        """Why this implementation cannot run as asked (one line), or None."""
        what = f"implementation {self.name!r} ({self.collective})"
        if backend not in self.backends:
            return f"{what} does not run on backend {backend!r} (it runs on {', '.join(self.backends)})"
        if (
            dtype
            and backend in GPU_BACKENDS
            and self.gpu_dtypes is not None
            and dtype not in self.gpu_dtypes
        ):
            return (
                f"{what} does not take {dtype} on {backend} (it takes {', '.join(self.gpu_dtypes)})"
            )
        if graph and backend not in GRAPH_BACKENDS:
            return f"-G (graph capture) is not available on backend {backend!r} (CuPy captures graphs on cuda only)"
        if graph and not self.capturable:
            return f"{what} cannot be captured in a graph (its calls synchronise with or work on the host): run it without -G"
        return None

    def ranks_problem(self, nranks: int) -> str | None:
        """Why this implementation cannot run on ``nranks`` ranks (one line), or None."""
        if self.pow2_ranks and nranks & (nranks - 1):
            return (
                f"implementation {self.name!r} ({self.collective}) needs a power-of-two number "
                f"of ranks, not {nranks}: start 2, 4, 8, ... ranks or use --impl ring"
            )
        return None

    def check_params(self, params: dict) -> None:
        """``ValueError`` naming the first ``--param`` key this implementation does not take."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            known = ", ".join(self.params) if self.params else "none: drop --param"
            raise ValueError(
                f"--impl {self.name} takes no --param {unknown[0]!r} (its parameters: {known})"
            )


_REGISTRY: dict[tuple[str, str], ImplSpec] = {}
_loaded = False


def register(
    collective: str,
    name: str,
    backends: tuple[str, ...] = BACKENDS,
    *,
    gpu_dtypes: tuple[str, ...] | None = None,
    capturable: bool = True,
    env: Mapping[str, str] | None = None,
    pow2_ranks: bool = False,
) -> Callable[[type], type]:
    """Class decorator: make ``cls`` the implementation ``name`` of ``collective``
    (keywords: see :class:`ImplSpec`)."""

    def wrap(cls: type) -> type:
        key = (collective, name)
        if key in _REGISTRY and _REGISTRY[key].factory is not cls:
            raise RuntimeError(f"implementation {collective}/{name} registered twice")
        summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        _REGISTRY[key] = ImplSpec(
            collective,
            name,
            cls,
            tuple(backends),
            summary,
            tuple(getattr(cls, "PARAMS", ())),
            None if gpu_dtypes is None else tuple(gpu_dtypes),
            capturable,
            dict(env or {}),
            pow2_ranks,
        )
        return cls

    return wrap


#: What holds no implementation and need not load on every rank: the cost model (its
#: profile table would load pydantic).
_NOT_PLUGINS = ("commbench.kernels.model.",)


def load_plugins() -> None:
    """Import every module under :mod:`kernels` once so their ``@register`` calls run."""
    global _loaded
    if _loaded:
        return
    import commbench.kernels

    for mod in pkgutil.walk_packages(commbench.kernels.__path__, prefix="commbench.kernels."):
        leaf = mod.name.rsplit(".", 1)[-1]
        if leaf.startswith("_") or mod.name.startswith(_NOT_PLUGINS):
            continue
        importlib.import_module(mod.name)
    _loaded = True


def implementations(collective: str | None = None) -> list[ImplSpec]:
    """Registered implementations, optionally of one collective, sorted by name."""
    load_plugins()
    specs = [s for s in _REGISTRY.values() if collective is None or s.collective == collective]
    return sorted(specs, key=lambda s: (s.collective, s.name))


def collectives() -> list[str]:
    load_plugins()
    return sorted({c for c, _ in _REGISTRY})


def lookup(collective: str, name: str) -> ImplSpec:
    """The implementation ``name`` of ``collective``; ``KeyError`` naming the choices."""
    load_plugins()
    try:
        return _REGISTRY[(collective, name)]
    except KeyError:
        known = ", ".join(s.name for s in implementations(collective)) or "none"
        raise KeyError(
            f"unknown implementation {name!r} for {collective} (known: {known})"
        ) from None
