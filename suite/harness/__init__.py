"""The per-rank harness behind ``commbench run``: topology, backends, timing, the watchdog,
workloads, data checking and result records (nccl-tests' shape: one harness, each
implementation a plug-in of :mod:`commbench.kernels.registry`)."""
