"""Collective algorithms and their per-rank executors.

Everything here is written against the small transport interface in
:mod:`commbench.kernels.transport`; nothing imports the CLI or the result writer (the flow is
``suite -> kernels`` only), and GPU-only modules are imported inside functions.
"""
