"""Element-type facts shared by algorithms and the harness (bf16 is ml_dtypes')."""

from __future__ import annotations

import numpy as np


def dtype_name(dtype) -> str:
    """Canonical name: ``float32``, ``float16``, ``bfloat16``, ``int32``, ..."""
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype.name == "bfloat16" else dtype.name


def tolerance(dtype, nranks: int) -> float:
    """Relative tolerance of a sum over ``nranks`` values (0 for integers)."""
    eps = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-12}.get(
        dtype_name(dtype), 0.0
    )
    return eps * max(1, nranks)
