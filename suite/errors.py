"""Errors that the CLI reports as one line and exit status 2."""


class UsageError(ValueError):
    """Bad input from the user: the message says what is wrong and how to fix it."""


class NotApplicable(Exception):
    """A GPU check that has nothing to test on this machine (e.g. NVSHMEM on a ROCm GPU);
    the message says why."""
