"""Slurm jobs from data (``commbench jobs``): system profiles, site values, allocations,
experiments and rendered batch scripts; the external baselines (nccl-tests, rccl-tests,
OSU) and ``commbench import``. The profiles and templates are :mod:`commbench.jobs.data`."""
