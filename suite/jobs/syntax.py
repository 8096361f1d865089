"""What batch scripts are written in: shell words, ``sbatch`` options, Slurm times, names.

Every value a template emits is quoted here (:func:`shell_finalize`); only :class:`Shell`
strings (built from values quoted here, or a profile's ``pre_run``/``post_run`` escape
hatches, which are shell code by definition) pass through as they are.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from commbench.errors import UsageError

#: Names commbench puts in paths and scripts: systems, experiments, implementations, run ids.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
#: ``sbatch`` short forms, used where the sites' documentation uses them (``-C gpu``).
SHORT_OPTIONS = {
    "account": "-A",
    "qos": "-q",
    "constraint": "-C",
    "partition": "-p",
    "nodes": "-N",
    "ntasks": "-n",
    "time": "-t",
    "cpus-per-task": "-c",
    "job-name": "-J",
    "output": "-o",
}
#: Short and alternative spellings users may put in ``extra_sbatch``.
OPTION_ALIASES = {
    **{short: long for long, short in SHORT_OPTIONS.items()},
    "-G": "gpus",
    "-e": "error",
    "-D": "chdir",
}
OPTION_RE = re.compile(r"^--([a-z][a-z0-9-]*)(?:=(.*))?$", re.DOTALL)
_WALLTIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class Shell(str):
    """Text that is already valid shell (quoted here, or a profile's escape hatch)."""


def quote(value: Any) -> str:
    """One shell word for ``value``; refuses newlines and NUL, which no word may carry."""
    text = str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        raise UsageError(f"value {text!r} contains a newline or NUL: remove it")
    quoted = shlex.quote(text)
    # `export X==a` is valid bash, but it reads like a typo (and shellcheck says so).
    return f"'{text}'" if quoted == text and text.startswith("=") else quoted


def shell_finalize(value: Any) -> str:
    """Jinja ``finalize``: every ``{{ value }}`` becomes quoted shell words."""
    if isinstance(value, Shell):
        return str(value)
    if isinstance(value, list | tuple):
        return " ".join(shell_finalize(v) for v in value)
    return quote(value)


def canonical_option(text: str) -> str:
    """``--mem=4G`` / ``--mem`` / ``-c`` -> the long name (``mem``, ``cpus-per-task``)."""
    text = text.strip()
    if text in OPTION_ALIASES:
        return OPTION_ALIASES[text]
    m = OPTION_RE.match(text)
    if not m:
        raise UsageError(f"{text!r} is not an sbatch option: write --name or --name=value")
    return OPTION_ALIASES.get(f"--{m.group(1)}", m.group(1))


def format_sbatch_option(name: str, value: str | None) -> Shell:
    """``-C gpu``, ``--gpus-per-node=4``: short forms where the sites' docs use them."""
    if value is None:
        return Shell(f"--{name}")
    if name in SHORT_OPTIONS:
        return Shell(f"{SHORT_OPTIONS[name]} {quote(value)}")
    return Shell(f"--{name}={quote(value)}")


def parse_walltime(text: str) -> int:
    """Slurm time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) -> seconds."""
    m = _WALLTIME_RE.match(str(text).strip())
    if not m:
        raise UsageError(f"bad walltime {text!r}: use HH:MM:SS, MM or D-HH:MM:SS")
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = a * 3600 + b * 60 + c
    elif b is not None:  # MM:SS
        seconds = a * 60 + b
    else:  # MM
        seconds = a * 60
    if seconds <= 0:
        raise UsageError(f"walltime {text!r} must be positive")
    return seconds


def format_walltime(seconds: int) -> str:
    """Seconds -> Slurm time (``HH:MM:SS``, ``D-HH:MM:SS`` from a day on)."""
    days, rest = divmod(int(seconds), 86400)
    hms = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{hms}" if days else hms
