"""Errors that the CLI reports as one line and exit status 2."""


class UsageError(ValueError):
    """Bad input from the user: the message says what is wrong and how to fix it."""
