"""``commbench report`` and ``commbench figures`` over :mod:`commbench.analysis`."""
