"""NVRAR: hierarchical all-reduce for the small messages of multi-node LLM decode.

Intra-node reduce-scatter, inter-node recursive doubling with one-sided puts of fused
8-byte LL8 cells (data + sequence-number flag, per-partner credits instead of barriers),
intra-node all-gather, after Singhania et al. 2026 (arXiv 2511.09557).

Modules: :mod:`~kernels.nvrar.cells` (cell format), :mod:`~kernels.nvrar.schedule`
(padding, timeouts; the shared :mod:`kernels.reduce` and :mod:`kernels.doubling` hold the
reductions and the doubling steps),
:mod:`~kernels.nvrar.tuning` (size -> chunk/parallelism tables),
:mod:`~kernels.nvrar.cpu` (MPI RMA windows), :mod:`~kernels.nvrar.cuda` (nvshmem4py +
CuPy kernels) and :mod:`~kernels.nvrar.allreduce` (the registered implementation).
"""
