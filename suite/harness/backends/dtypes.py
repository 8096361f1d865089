"""Element types by name (``-d``), bf16 through ml_dtypes on the host."""

from __future__ import annotations

import numpy as np

from commbench.errors import UsageError
from commbench.kernels.dtypes import dtype_name, tolerance  # noqa: F401  (re-exported)


def _bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


_NAMES = {
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "float64": "float64",
    "fp64": "float64",
    "int": "int32",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "int8": "int8",
}
DTYPE_NAMES = sorted(set(_NAMES.values()))


def parse_dtype(name: str) -> np.dtype:
    """``-d`` value -> numpy dtype (``bfloat16`` is ml_dtypes')."""
    canonical = _NAMES.get(name.lower())
    if canonical is None:
        raise UsageError(f"unknown dtype {name!r}: choose one of {', '.join(DTYPE_NAMES)}")
    return _bfloat16() if canonical == "bfloat16" else np.dtype(canonical)
