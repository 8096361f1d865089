"""Sizes with binary suffixes, as nccl-tests and OSU accept them."""

from __future__ import annotations

import re

from commbench.errors import UsageError

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """``"64K"`` -> 65536; plain integers are bytes. Raises :class:`UsageError`."""
    if isinstance(text, int):
        if text < 0:
            raise UsageError(f"size must not be negative: {text}")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UsageError(f"bad size {text!r}: use an integer with an optional K, M, G or T suffix")
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


def format_size(nbytes: int) -> str:
    """65536 -> ``"64K"``; exact binary multiples get a suffix, others stay bytes."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def size_sweep(minbytes: int, maxbytes: int, factor: int = 2, increment: int = 0) -> list[int]:
    """The sizes nccl-tests visits: geometric by ``factor`` or arithmetic by ``increment``."""
    if minbytes > maxbytes:
        raise UsageError(f"-b {minbytes} is larger than -e {maxbytes}: swap them")
    if increment < 0 or (increment == 0 and factor < 2):
        raise UsageError("-f must be at least 2 (or give -i with a positive increment)")
    sizes = []
    s = minbytes
    while s <= maxbytes:
        sizes.append(s)
        if increment:
            s += increment
        elif s == 0:
            s = 1
        else:
            s *= factor
    return sizes
