"""Registry of collective implementations (the nccl-tests "plug-in" shape).

An implementation is a small class registered with :func:`register`. The harness
constructs it once per run with the transport, calls ``setup(case)`` outside the timed
region whenever the buffers or the traffic change, and ``run(case)`` for each timed call.
An optional ``info()`` returns extra fields for the result record (schedule synthesis
time, stage count, extra memory, ...). A class attribute ``PARAMS`` names the
``--param`` keys it takes (none by default); the driver refuses any other key up front.

Plug-ins are found by importing every module under :mod:`kernels` (see
:func:`load_plugins`), so adding an implementation means adding one module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

ALL_BACKENDS = ("cpu", "cuda", "rocm")


@dataclass(frozen=True)
class ImplSpec:
    collective: str
    name: str
    factory: Callable
    backends: tuple[str, ...]
    summary: str
    params: tuple[str, ...] = ()

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
    collective: str, name: str, backends: tuple[str, ...] = ALL_BACKENDS
) -> Callable[[type], type]:
    """Class decorator: make ``cls`` the implementation ``name`` of ``collective``."""

    def wrap(cls: type) -> type:
        key = (collective, name)
        if key in _REGISTRY and _REGISTRY[key].factory is not cls:
            raise RuntimeError(f"implementation {collective}/{name} registered twice")
        summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        params = tuple(getattr(cls, "PARAMS", ()))
        _REGISTRY[key] = ImplSpec(collective, name, cls, tuple(backends), summary, params)
        return cls

    return wrap


def load_plugins() -> None:
    """Import every module under :mod:`kernels` once so their ``@register`` calls run."""
    global _loaded
    if _loaded:
        return
    import kernels

    for mod in pkgutil.walk_packages(kernels.__path__, prefix="kernels."):
        leaf = mod.name.rsplit(".", 1)[-1]
        if leaf.startswith("_"):
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
