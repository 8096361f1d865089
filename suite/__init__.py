"""commbench: benchmarks for GPU collective communication (FAST all-to-allv, NVRAR
all-reduce, MPI/NCCL/RCCL baselines).

The command line is :mod:`commbench.cli`; the parts are subpackages (``harness``, ``jobs``,
``cluster``, ``model``, ``sweep``, ``report``, ``gpucheck``, ``benchmarks``) over
:mod:`commbench.analysis` and :mod:`commbench.kernels`. Nothing is imported here, so
``import commbench.kernels`` costs only what it needs.

MPI starts as a C benchmark starts it, not at mpi4py's default ``MPI_THREAD_MULTIPLE``:
Open MPI then locks inside every call (~0.3 us each, measured beside a C loop of the same
call), so a small collective would read slower than OSU reads it. ``MPI_THREAD_SERIALIZED``
still lets the watchdog's thread abort the job. ``MPI4PY_RC_THREAD_LEVEL`` set by the user
wins (and is what ranks started from here inherit).

Host buffers are ordinary pages, as a C benchmark's ``malloc`` gives: numpy would ask for
transparent huge pages for arrays of 4 MiB and more (where the kernel grants them on
request), which made a 4 MiB exchange here read up to 2.5x faster than the same call on
OSU-style buffers. ``NUMPY_MADVISE_HUGEPAGE=1`` set by the user wins.
"""

import os

__version__ = "0.1.0"
#: The MPI thread level commbench's processes ask for (see above).
MPI_THREAD_LEVEL = "serialized"

os.environ.setdefault("MPI4PY_RC_THREAD_LEVEL", MPI_THREAD_LEVEL)
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
