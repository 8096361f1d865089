"""What every probe benchmark shares: its options passed on to its worker, and the
worker run in place under a launcher."""

from __future__ import annotations

import argparse

import pytest

from commbench.benchmarks import owncluster
from commbench.errors import UsageError


def test_a_probe_s_options_reach_its_worker_as_it_parses_them() -> None:
    args = argparse.Namespace(rest_size=64, sizes=[131072, 1048576], seed=1, nic="100mbit")
    assert owncluster.worker_argv(args, ("rest_size", "sizes", "seed")) == [
        "--rest-size", "64", "--sizes", "131072,1048576", "--seed", "1"]  # fmt: skip


def test_under_a_launcher_the_worker_runs_and_no_cluster_is_built(capsys) -> None:
    parser = owncluster.probe_parser("some_probe", "A probe.\n\nMore.")
    parser.add_argument("--calls", type=int, default=3)

    def no_cluster():
        raise AssertionError("a worker builds no cluster")

    args = parser.parse_args(["--worker", "--calls", "5"])
    assert owncluster.start(parser, args, lambda a: a.calls, no_cluster, ("calls",)) == 5

    def refused():
        raise UsageError("--nodes 3: give a power of two")

    with pytest.raises(SystemExit) as exc:  # bad input: the parser's one line, status 2
        owncluster.start(parser, parser.parse_args([]), lambda a: 0, refused, ("calls",))
    assert exc.value.code == 2
    assert "--nodes 3: give a power of two" in capsys.readouterr().err
