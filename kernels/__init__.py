"""Collective algorithms and their per-rank executors, and the cost model.

Everything here is written against the small transport interface in
:mod:`commbench.kernels.transport`; nothing here imports the rest of commbench (the flow is
``commbench -> commbench.analysis -> commbench.kernels`` only), and GPU-only modules are
imported inside functions.
"""
