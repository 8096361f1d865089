"""Element-wise reductions, written once against the array namespace (numpy or cupy).

bf16 is reduced on its bit pattern (uint16 storage): widened to fp32 exactly
(``bits << 16``), reduced in fp32, rounded back to nearest-even. That is the arithmetic
ml_dtypes uses for a bf16 ufunc (a float op followed by one rounding), so numpy and cupy
agree bit for bit, and it also works where the array library has no bfloat16 type (cupy
buffers of bf16 are uint16 arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from types import ModuleType
from typing import Any

import numpy as np

Array = Any

OPS = ("sum", "prod", "max", "min")
_SUPPORTED_NAMES = ("float32", "float16", "bfloat16", "int32")

_UFUNC = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


def __getattr__(name: str) -> Any:
    """``BF16`` and ``SUPPORTED_DTYPES`` are made on first use: ml_dtypes takes ~0.6 s to
    import, which every rank of every launch would pay even when no bf16 is in sight."""
    if name == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name == "SUPPORTED_DTYPES":
        return tuple(np.dtype(__getattr__("BF16") if n == "bfloat16" else n)
                     for n in _SUPPORTED_NAMES)  # fmt: skip
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def is_bf16(dtype: Any) -> bool:
    """Whether ``dtype`` is bfloat16 (ml_dtypes'; a bf16 array exists only once it is loaded).
    Cached: ``dtype.name`` costs ~3 us, paid twice per reduction step in a timed call."""
    return np.dtype(dtype).name == "bfloat16"


def check_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)`` if the all-reduce kernels support it, else a one-line error."""
    dt = np.dtype(dtype)
    if dt.name not in _SUPPORTED_NAMES:
        names = ", ".join(_SUPPORTED_NAMES)
        raise ValueError(f"dtype {dt} is not supported by this all-reduce (use one of: {names})")
    return dt


def check_op(op: str) -> str:
    if op not in OPS:
        raise ValueError(f"reduction op {op!r} is not supported (use one of: {', '.join(OPS)})")
    return op


def storage(arr: Array, dtype: np.dtype) -> Array:
    """View ``arr`` (any 1-D buffer holding ``dtype`` elements) in its compute dtype.

    bf16 is uint16 storage; the others are their own dtype.
    """
    return arr.view(np.uint16) if is_bf16(dtype) else arr.view(dtype)


def bf16_to_f32(xp: ModuleType, bits: Array) -> Array:
    """uint16 bf16 bit patterns -> float32 values (exact)."""
    return (bits.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


def f32_to_bf16(xp: ModuleType, values: Array) -> Array:
    """float32 -> uint16 bf16 bit patterns, round to nearest even; NaN stays a quiet NaN."""
    bits = values.view(xp.uint32)
    lsb = (bits >> xp.uint32(16)) & xp.uint32(1)
    rounded = (bits + (xp.uint32(0x7FFF) + lsb)) >> xp.uint32(16)
    quiet_nan = (bits >> xp.uint32(16)) | xp.uint32(0x0040)
    return xp.where(values != values, quiet_nan, rounded).astype(xp.uint16)


def reduce_bf16_bits(xp: ModuleType, out: Array, a: Array, b: Array, op: str) -> None:
    """``out = a (op) b`` on bf16 bit patterns (uint16 views): widen, reduce in fp32, round."""
    ufunc = getattr(xp, _UFUNC[op])
    fa = bf16_to_f32(xp, a.view(xp.uint16))
    fb = bf16_to_f32(xp, b.view(xp.uint16))
    out.view(xp.uint16)[...] = f32_to_bf16(xp, ufunc(fa, fb))


def reduce_into(xp: ModuleType, out: Array, a: Array, b: Array, op: str, dtype: np.dtype) -> None:
    """``out = a (op) b`` element-wise; the three hold ``dtype`` elements (``out`` may alias).

    bf16 goes through :func:`reduce_bf16_bits` except on numpy, where ml_dtypes' own
    loops give the same bits (tested) five times faster.
    """
    if is_bf16(dtype):
        if xp is np:
            getattr(np, _UFUNC[op])(a.view(dtype), b.view(dtype), out=out.view(dtype))
        else:
            reduce_bf16_bits(xp, out, a, b, op)
        return
    ufunc = getattr(xp, _UFUNC[op])
    ufunc(storage(a, dtype), storage(b, dtype), out=storage(out, dtype))


def bind_reduce(
    xp: ModuleType, out: Array, a: Array, b: Array, op: str, dtype: np.dtype
) -> Callable[[], None]:
    """:func:`reduce_into` with its arguments bound once: a call of no arguments doing
    the same arithmetic (same bits). On numpy it is the ufunc itself on views made here
    (``out`` positional where numpy allows), so a call pays no dtype tests or views: the
    per-step host cost of the all-reduce algorithms at small sizes."""
    if xp is np:  # bf16 too: ml_dtypes' loops (see reduce_into)
        ufunc, a, b, out = getattr(np, _UFUNC[op]), a.view(dtype), b.view(dtype), out.view(dtype)
        if op in ("max", "min"):  # numpy deprecates a positional out for these two
            return partial(ufunc, a, b, out=out)
        return partial(ufunc, a, b, out)  # positional: a third of the keyword's host cost
    return partial(reduce_into, xp, out, a, b, op, dtype)
