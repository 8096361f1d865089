"""Baseline implementations: the MPI library, NCCL/RCCL, and textbook algorithms."""
