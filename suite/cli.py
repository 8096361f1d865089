"""``commbench`` command line: one sub-command per module in :data:`SUBCOMMANDS`.

Each module exposes ``add_parser(subparsers)``, which registers its parser and sets
``func(args) -> int``. Bad input raises :class:`commbench.errors.UsageError` (or
``ValueError`` from the pure code): one line on stderr, exit status 2; an ``OSError``
(disk full, permissions) or ``MemoryError`` is one line too, exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from commbench import __version__

SUBCOMMANDS = [
    "commbench.harness.cli",
    "commbench.jobs.cli",
    "commbench.sweep.cli",
    "commbench.report.cli",
    "commbench.model.cli",
    "commbench.compare.cli",
    "commbench.cluster.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="commbench",
        description="Benchmarks for GPU collective communication (FAST, NVRAR, MPI/NCCL/RCCL).",
    )
    parser.add_argument("--version", action="version", version=f"commbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # UsageError is a ValueError
        print(f"commbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 128 + signal.SIGPIPE
    except OSError as exc:  # disk full, permissions, I/O: one line naming the file
        where = f"{exc.filename}: " if exc.filename and str(exc.filename) not in str(exc) else ""
        print(f"commbench {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"commbench {args.command}: error: out of memory: ask for less", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
