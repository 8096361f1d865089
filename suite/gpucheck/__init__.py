"""The one-GPU check (``make gpu-check``, ``python -m commbench.gpucheck OUT_DIR``)."""
