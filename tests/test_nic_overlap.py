"""The NIC-overlap probe: its arithmetic, its refusals and a 4-rank run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.benchmarks.nic_overlap import main, report, train_report
from commbench.model.calibrate import in_flight, queued_ahead
from tests.mpirun import run_mpi


def test_in_flight_is_the_share_not_yet_arrived() -> None:
    assert in_flight(1000, 0.0, 10.0) == 1000  # returned at once: nothing had arrived
    assert in_flight(1000, 10.0, 10.0) == 0  # returned on arrival
    assert in_flight(1000, 2.5, 10.0) == 750
    with pytest.raises(ValueError):
        in_flight(1000, 1.0, 0.0)


@settings(max_examples=100, deadline=None)
@given(
    st.floats(1e3, 1e7),  # bytes
    st.floats(1.0, 500.0),  # ms alone
    st.floats(0.0, 0.9),  # release, as a share of the time alone
    st.floats(0.0, 1.0),  # the share of the bytes left at the release queued ahead
)
def test_queued_ahead_recovers_the_queue(nbytes, alone, at, ahead) -> None:
    """A message with Q of its L bytes left queued ahead of the second, the rest split
    evenly, arrives at release + (2 L - Q) / rate: queued_ahead reads Q back."""
    release = at * alone
    rate = nbytes / alone
    left = nbytes - rate * release
    arrival = release + (2 * left - ahead * left) / rate
    assert queued_ahead(nbytes, alone, release, arrival) == pytest.approx(
        ahead * left, rel=1e-6, abs=1e-6 * nbytes
    )


def test_queued_ahead_of_a_waiting_second_and_an_even_split() -> None:
    assert queued_ahead(1000, 10.0, 2.0, 10.0) == pytest.approx(800)  # the second waited
    assert queued_ahead(1000, 10.0, 2.0, 18.0) == pytest.approx(0)  # an even split at once
    assert queued_ahead(1000, 10.0, 2.0, 30.0) == 0  # slower than that: nothing ahead
    with pytest.raises(ValueError):
        queued_ahead(1000, 10.0, 5.0, 5.0)


def test_train_line() -> None:
    rows = [([5.0, 28.0, 60.0], [62.0, 130.0, 128.0]), ([5.2, 30.0, 59.0], [63.0, 126.0, 131.0])]
    line = train_report(1 << 19, rows)
    assert line == (" 512K x 3: sends returned at 5.1, 29.0, 59.5; "
                    "arrived at 62.5, 128.0, 129.5 ms")  # fmt: skip


def test_report_line() -> None:
    alone = np.array([[5.0, 40.0, 0.0], [5.0, 44.0, 0.0], [5.0, 42.0, 0.0]])
    overlap = np.array([[5.0, 79.0, 84.0]] * 3)
    line = report(1 << 19, alone, overlap)
    assert line.startswith(" 512K: alone    42.0 ms, send returned at   5.0 with")
    assert "first    79.0, second    84.0 ms, 0 KiB of the first queued ahead of" in line
    early = report(1 << 19, alone, np.array([[5.0, 4.0, 84.0]] * 3))
    assert early.endswith("the first was through before the second started")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--sizes", "1M,x"], "x"),
        (["--repeats", "0"], "--repeats and --train at least 1"),
        (["--train", "0"], "--repeats and --train at least 1"),
        (["--nic", "fast"], "bad NIC rate 'fast'"),
    ],
)
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_worker_on_four_ranks() -> None:
    proc = run_mpi(
        4,
        [
            "-m",
            "commbench.benchmarks.nic_overlap",
            "--worker",
            "--sizes",
            "64K,128K",
            "--repeats",
            "2",
        ],  # fmt: skip
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# rank 0 (node 0) -> ranks 2 and 3 (node 1)")
    assert [ln.split(":")[0].strip() for ln in lines[1:]] == ["64K", "128K", "64K x 2", "128K x 2"]
    # shared memory here: the first may be through before the second starts
    assert all("queued ahead" in ln or "was through" in ln for ln in lines[1:3])
    # trains of two (two ranks a node): two returns and two arrivals each
    for ln in lines[3:]:
        returns, arrivals = ln.split("returned at ")[1].split("; arrived at ")
        assert len(returns.split(", ")) == 2 and len(arrivals.removesuffix(" ms").split(", ")) == 2


def test_worker_refuses_an_odd_rank_count() -> None:
    proc = run_mpi(3, ["-m", "commbench.benchmarks.nic_overlap", "--worker"], timeout=120)
    assert proc.returncode != 0
    assert "run it on 2 nodes of at least 2 ranks" in proc.stderr


def test_a_cluster_that_cannot_be_built_is_one_line(monkeypatch, capsys) -> None:
    from commbench.cluster import netns

    def refuse(spec, folder):
        raise netns.ClusterError("the emulated cluster needs root: run it as root")

    monkeypatch.setattr(netns, "namespaces_with_prefix", lambda prefix: [])
    monkeypatch.setattr(netns, "up", refuse)
    assert main(["--sizes", "64K"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "python -m commbench.benchmarks.nic_overlap: the emulated cluster needs root: run it as root"
    ]
