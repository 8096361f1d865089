"""``python -m commbench.benchmarks.loop_edges``: the latency loop's first and last calls
against the others."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commbench.benchmarks import loop_edges
from tests.mpirun import ROOT, mpi_env
from tests.probes import refusal


def test_edge_ratios_are_over_the_median_of_the_calls_between():
    first, last, middle = loop_edges.edge_ratios([3.0, 1.0, 2.0, 1.0, 1.0, 5.0])
    assert (first, last, middle) == (3.0, 5.0, 1.0)


@pytest.mark.parametrize("argv", [["6"], ["1"], ["--launches", "0"], ["--after-us", "-1"]])
def test_bad_input_is_refused(argv, capsys):
    assert "power of two" in refusal(loop_edges.main, argv, capsys)


def test_a_small_run_prints_every_loop_kind():
    proc = subprocess.run(
        [sys.executable, "-m", "commbench.benchmarks.loop_edges", "2", "--launches", "1"],
        env=mpi_env(), cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("  ")]
    rows = [line for line in lines if not line.strip()[0].isdigit()]
    names = "\n".join(rows)
    for kind in ("bare mpi4py loop", "one untimed call each side", "recursive-doubling, python",
                 "mpi, native loop, 256 B", "mpi, native loop, 4096 B"):  # fmt: skip
        assert kind in names
    assert len(rows) == 1 + 6  # the header and six loops
    finish = [line.split() for line in lines if line.strip()[0].isdigit()]
    assert [int(f[0]) for f in finish] == [256 << 10, 1 << 20, 4 << 20]
    assert all(float(f[2]) > 0 for f in finish)
