"""NVRAR: hierarchical all-reduce for the small messages of multi-node LLM decode.

Intra-node reduce-scatter, inter-node recursive doubling with one-sided puts of fused
8-byte LL8 cells (data + sequence-number flag, per-partner credits instead of barriers),
intra-node all-gather, after Singhania et al. 2026 (arXiv 2511.09557).

Modules: :mod:`~commbench.kernels.nvrar.cells` (cell format), :mod:`~commbench.kernels.nvrar.schedule`
(padding, timeouts; the shared :mod:`commbench.kernels.reduce` and :mod:`commbench.kernels.doubling` hold the
reductions and the doubling steps),
:mod:`~commbench.kernels.nvrar.tuning` (size -> chunk/parallelism tables),
:mod:`~commbench.kernels.nvrar.cpu` (MPI RMA windows), :mod:`~commbench.kernels.nvrar.cuda` (nvshmem4py +
CuPy kernels) and :mod:`~commbench.kernels.nvrar.allreduce` (the registered implementation).
"""
