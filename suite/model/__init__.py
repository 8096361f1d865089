"""The cost model's front end: ``commbench simulate`` (predictions as result records),
``schedule``, ``workload`` and ``model-validation`` over :mod:`commbench.kernels.model`."""
