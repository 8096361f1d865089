"""Cost model: predicted times of all-to-allv and all-reduce algorithms on a two-tier fabric.

Pure numpy, no MPI and no GPU: :class:`Fabric` holds a system's constants (from the job
profiles, see :mod:`commbench.model.simulate`), :mod:`commbench.kernels.model.alltoallv` and
:mod:`commbench.kernels.model.allreduce` turn traffic or a message size into per-rank finish times.
"""

from commbench.kernels.model.alltoallv import Prediction, lower_bound
from commbench.kernels.model.fabric import Fabric, step_finish

__all__ = ["Fabric", "Prediction", "lower_bound", "step_finish"]
