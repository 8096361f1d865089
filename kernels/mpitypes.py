"""MPI datatypes and reductions for numpy dtypes, including the ones MPI lacks (fp16, bf16)."""

from __future__ import annotations

from functools import cache

import numpy as np

from commbench.kernels.dtypes import dtype_name

_OPS = ("sum", "prod", "max", "min")
_NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _builtin_type(name: str):
    from mpi4py import MPI

    return {
        "float32": MPI.FLOAT,
        "float64": MPI.DOUBLE,
        "int32": MPI.INT32_T,
        "int64": MPI.INT64_T,
        "uint8": MPI.UINT8_T,
        "int8": MPI.INT8_T,
    }.get(name)


@cache
def _user_type_and_op(dtype: np.dtype, op: str):
    """A datatype of one element's bytes and a user reduction over it.

    A contiguous block per element keeps MPI from splitting an element when it pipelines a
    reduction.
    """
    from mpi4py import MPI

    datatype = MPI.BYTE.Create_contiguous(dtype.itemsize).Commit()
    ufunc = _NUMPY_OPS[op]

    def reduce(inbuf, inoutbuf, _datatype) -> None:
        a = np.frombuffer(inbuf, dtype=dtype)
        b = np.frombuffer(inoutbuf, dtype=dtype)
        ufunc(a, b, out=b)

    return datatype, MPI.Op.Create(reduce, commute=True)


def mpi_type_and_op(dtype, op: str = "sum"):
    """The MPI datatype and reduction for ``dtype`` and ``op``."""
    from mpi4py import MPI

    if op not in _OPS:
        raise ValueError(f"unknown reduction {op!r}: choose one of {', '.join(_OPS)}")
    dtype = np.dtype(dtype)
    builtin = _builtin_type(dtype_name(dtype))
    if builtin is not None:
        return builtin, {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]
    return _user_type_and_op(dtype, op)
