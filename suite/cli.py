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
import time

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


#: how long a launched rank that leaves a refusal to rank 0 waits before it exits: the
#: launcher ends the whole job when the first rank exits non-zero, and rank 0, making the
#: same checks at about the same time, must have said what is wrong by then (exiting at
#: once, another rank's status killed rank 0 before its line in ~1 of 6 runs of 3 ranks)
RANK_0_GRACE_S = 5.0


def _leave_it_to_rank_0() -> bool:
    """Where rank 0 says what is wrong (:func:`_said_by_rank_0`), wait for it to
    (:data:`RANK_0_GRACE_S`; the launcher ends this rank once rank 0 has exited) and
    return True; else False at once."""
    if not _said_by_rank_0():
        return False
    time.sleep(RANK_0_GRACE_S)
    return True


class _Parser(argparse.ArgumentParser):
    """An argument parser whose refusals rank 0 alone says where a launcher started every
    rank with the same arguments (sub-command parsers are of this class too)."""

    def error(self, message: str):
        if _leave_it_to_rank_0():
            self.exit(2)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="commbench",
        description="Benchmarks for GPU collective communication (FAST, NVRAR, MPI/NCCL/RCCL).",
    )
    parser.add_argument("--version", action="version", version=f"commbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def _said_by_rank_0() -> bool:
    """Whether this process is a launched rank other than 0 that has not started MPI:
    every rank checks the same arguments the same way before MPI starts, so rank 0 says
    what is wrong, once (a rank that fails after MPI started says it itself)."""
    from commbench.launch import launched_rank

    mpi = sys.modules.get("mpi4py.MPI")
    started = mpi is not None and (mpi.Is_initialized() or mpi.Is_finalized())
    return not started and launched_rank() != 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # UsageError is a ValueError
        if not _leave_it_to_rank_0():
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
