"""A probe benchmark on an emulated cluster of its own: up, run its worker, down.

For the small transport probes (:mod:`~commbench.benchmarks.exchange_order`,
:mod:`~commbench.benchmarks.nic_overlap`, :mod:`~commbench.benchmarks.barrier_skew`,
:mod:`~commbench.benchmarks.bucket_state`, :mod:`~commbench.benchmarks.burst_loss`,
:mod:`~commbench.benchmarks.barrier_loss`, :mod:`~commbench.benchmarks.exchanging_ranks`,
:mod:`~commbench.benchmarks.step_content`): the
``target-deep`` queue (or another emulated profile's), a NIC rate given in the usual
form, the cluster removed however the run ends.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from commbench.cluster.plan import ClusterSpec, parse_rate
from commbench.errors import UsageError


def probe_parser(module: str, doc: str) -> argparse.ArgumentParser:
    """The parser of the probe ``python -m commbench.benchmarks.MODULE`` (its description
    the first paragraph of ``doc``) with what every probe takes: ``--nic`` and
    ``--worker``; the caller adds its own."""
    parser = argparse.ArgumentParser(prog=f"python -m commbench.benchmarks.{module}",
                                     description=doc.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--nic", default="100mbit", help="emulated NIC rate (100mbit)")
    parser.add_argument("--worker", action="store_true", help="run under a launcher already")
    parser.set_defaults(probe_module=f"commbench.benchmarks.{module}")  # what start() runs
    return parser


def cluster_spec(prefix: str, nodes: int, ranks_per_node: int, nic: str,
                 profile: str = "target-deep") -> ClusterSpec:  # fmt: skip
    """The probe's cluster on the emulated ``profile`` (``UsageError`` on a bad node
    count or rate)."""
    from commbench.cluster.profiles import load_emulated_profile

    prof = load_emulated_profile(profile)
    return prof.cluster_spec(prefix, nodes, ranks_per_node, parse_rate(nic))


def run_worker(spec: ClusterSpec, module: str, argv: list[str], timeout: float = 600,
               then: Callable[[ClusterSpec, Path], int] | None = None) -> int:  # fmt: skip
    """Bring ``spec`` up (root), run ``python -m MODULE --worker ARGV...`` on every slot
    through ``commbench cluster exec`` (and, where it succeeded, ``then(spec, state
    folder)`` on the same cluster), take the cluster down; the first non-zero exit
    status, else 0."""
    from commbench.cluster import netns

    folder = Path(tempfile.mkdtemp(prefix=f"{spec.prefix}-state-"))
    if netns.namespaces_with_prefix(spec.prefix):
        netns.remove(spec.prefix, folder)
    netns.up(spec, folder)
    try:
        cmd = [sys.executable, "-m", "commbench", "cluster", "exec", "--prefix", spec.prefix,
               "--state", str(folder), "--timeout", str(timeout), "--",
               sys.executable, "-m", module, "--worker", *argv]  # fmt: skip
        status = subprocess.run(cmd, timeout=timeout + 60).returncode
        return status or (then(spec, folder) if then is not None else 0)
    finally:
        netns.remove(spec.prefix, folder)


def refuse(comm, prog: str, problem: str) -> int:
    """A worker's refusal of its launch: rank 0 says ``prog: problem`` in one line on
    stderr, every rank returns exit status 2 (no rank waits for another)."""
    if comm.rank == 0:
        print(f"{prog}: {problem}", file=sys.stderr)
    return 2


def run_worker_or_say(prog: str, spec: ClusterSpec, module: str, argv: list[str],
                      then: Callable[[ClusterSpec, Path], int] | None = None) -> int:  # fmt: skip
    """:func:`run_worker`, a cluster that cannot be built (not root, a tool missing) said
    in one line with exit status 2."""
    try:
        return run_worker(spec, module, argv, then=then)
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


def worker_argv(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """``--NAME VALUE`` for each option ``names`` (argparse destinations) of ``args``: what
    a probe passes on to its worker (a list as comma-separated values)."""
    out: list[str] = []
    for name in names:
        value = getattr(args, name)
        text = ",".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
        out += [f"--{name.replace('_', '-')}", text]
    return out


def start(parser: argparse.ArgumentParser, args: argparse.Namespace,
          worker: Callable[[argparse.Namespace], int], spec_of: Callable[[], ClusterSpec],
          forward: Sequence[str], then: Callable[[ClusterSpec, Path], int] | None = None) -> int:  # fmt: skip
    """A probe's run once its options are checked (``parser`` and ``args`` from
    :func:`probe_parser`): ``worker(args)`` under a launcher already (``--worker``), else
    on a cluster of its own, ``spec_of()`` (a ``UsageError`` refused as the parser's
    one-line error), the probe's module run there as its worker with the options
    ``forward`` (:func:`worker_argv`; ``then`` as :func:`run_worker`'s)."""
    if args.worker:
        return worker(args)
    try:
        spec = spec_of()
    except UsageError as exc:
        parser.error(str(exc))
    return run_worker_or_say(parser.prog, spec, args.probe_module, worker_argv(args, forward), then)
