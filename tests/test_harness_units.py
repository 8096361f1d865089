"""Pure parts of the harness: sizes, metrics, layouts, seeded data and its closed forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.errors import UsageError
from commbench.harness import collectives, metrics
from commbench.harness.topology import Layout, check_gpus_per_node
from commbench.units import format_size, parse_size, size_sweep


def test_parse_and_format_sizes():
    assert parse_size("8") == 8
    assert parse_size("64K") == 65536
    assert parse_size("2M") == 2 << 20
    assert parse_size("1g") == 1 << 30
    assert format_size(65536) == "64K" and format_size(1000) == "1000"
    for bad in ("", "-1", "1.5M", "12Q"):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_size_sweep_like_nccl_tests():
    assert size_sweep(8, 64, 2) == [8, 16, 32, 64]
    assert size_sweep(1024, 4096, 4) == [1024, 4096]
    assert size_sweep(100, 400, 2, increment=100) == [100, 200, 300, 400]
    with pytest.raises(UsageError, match="larger than"):
        size_sweep(64, 8)


def test_metrics_hand_computed():
    # 1 MiB all-reduce in 100 us on 8 ranks: algbw 10.48576 GB/s, busbw x 2*7/8.
    alg = metrics.algbw_GBps(1 << 20, 100.0)
    assert alg == pytest.approx(10.48576)
    assert metrics.busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert metrics.busbw_factor("alltoallv", 8) == pytest.approx(0.875)
    traffic = np.array([[0, 5, 1], [2, 0, 0], [9, 0, 0]])  # rank 0 receives 11, sends 6
    assert metrics.alltoallv_metric_bytes(traffic) == 11
    t = np.array([3.0, 1.0, 2.0])
    assert [metrics.reduce_times(t, h) for h in ("rank0", "avg", "min", "max")] == [3, 2, 1, 3]
    s = metrics.summarise(t)
    assert (s["time_us_min"], s["time_us_avg"], s["time_us_max"]) == (1.0, 2.0, 3.0)


def test_layout_and_gpus_per_node():
    lay = Layout(rank=6, size=8, gpus_per_node=4)
    assert (lay.nodes, lay.node, lay.local) == (2, 1, 2)
    with pytest.raises(UsageError, match="does not divide"):
        check_gpus_per_node(8, 3)
    with pytest.raises(UsageError, match="at least 1"):
        check_gpus_per_node(8, 0)


@settings(max_examples=60, deadline=None)
@given(
    nranks=st.integers(1, 12),
    count=st.integers(0, 50),
    rep=st.integers(0, 5),
    op=st.sampled_from(["sum", "prod", "max", "min"]),
)
def test_allreduce_closed_form_matches_brute_force(nranks, count, rep, op):
    inputs = np.stack(
        [collectives.allreduce_input(r, count, rep, np.int64, op) for r in range(nranks)]
    )
    brute = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op](inputs, axis=0)
    assert np.array_equal(collectives.allreduce_expected(nranks, count, rep, op), brute)
    assert collectives.allreduce_wrong(brute.astype(np.float32), nranks, rep, op) == 0
    if count:
        off = brute.astype(np.float32)
        off[0] += 1
        assert collectives.allreduce_wrong(off, nranks, rep, op) == 1


@settings(max_examples=40, deadline=None)
@given(
    traffic=st.integers(1, 6).flatmap(
        lambda p: st.lists(st.integers(0, 40), min_size=p * p, max_size=p * p).map(
            lambda v: np.array(v, dtype=np.int64).reshape(p, p)
        )
    ),
    rep=st.integers(0, 3),
)
def test_alltoallv_expected_is_what_senders_send(traffic, rep):
    p = traffic.shape[0]
    sends = [collectives.alltoallv_send_data(traffic, r, rep) for r in range(p)]
    offsets = [np.concatenate(([0], np.cumsum(traffic[r]))) for r in range(p)]
    for dst in range(p):
        delivered = [sends[src][offsets[src][dst] : offsets[src][dst + 1]] for src in range(p)]
        assert np.array_equal(
            np.concatenate(delivered), collectives.alltoallv_expected(traffic, dst, rep)
        )


def test_uniform_traffic_floors_to_unit():
    t = collectives.uniform_traffic(4, 1000, 4)
    assert (t == 248).all()


def test_layout_maps_group_peers_to_world_ranks():
    lay = Layout(rank=6, size=8, gpus_per_node=4)  # node 1, local 2
    assert [lay.to_world("node", p) for p in range(4)] == [4, 5, 6, 7]
    assert [lay.to_world("rail", p) for p in range(2)] == [2, 6]
    assert lay.to_world("world", 3) == 3
    with pytest.raises(ValueError, match="unknown group"):
        lay.to_world("row", 0)


def test_make_run_measures_and_models_every_skew_of_figure_2():
    from commbench.harness.workloads import expand_workloads, parse_workload
    from commbench.sweep import sweep

    def skews(workloads) -> set[float]:
        specs = [s for w in workloads for s in expand_workloads(w)]
        return {parse_workload(s).args[0] for s in specs if s.startswith("zipf")}

    measured = skews(w for item in sweep.LOCAL_SWEEP if item.collective == "alltoallv"
                     for w in item.workloads)  # fmt: skip
    argvs = [argv for _, argv in sweep.MODELLED if argv[0] == "alltoallv"]
    modelled = skews(argv[argv.index("--workload") + 1] for argv in argvs)
    assert measured == modelled == set(sweep.SKEWS) == {0.0, 0.4, 0.8, 0.99}
    cmds = sweep.launches("cpu", 4, Path("r.jsonl"))
    assert any("zipf:0.0,0.4,0.8,0.99" in c for c in cmds)


class _PostLog:
    """A communicator that records the order of point-to-point posts."""

    def __init__(self) -> None:
        self.posts: list[str] = []

    def Isend(self, buf, dest, tag):  # noqa: N802 (mpi4py's names)
        self.posts.append(f"send {dest}")

    def Send_init(self, buf, dest, tag):  # noqa: N802
        self.posts.append(f"send {dest}")

    def Irecv(self, buf, source, tag):  # noqa: N802
        self.posts.append(f"recv {source}")

    def Recv_init(self, buf, source, tag):  # noqa: N802
        self.posts.append(f"recv {source}")

    def group(self, name: str) -> _PostLog:
        return self


def test_cpu_transport_posts_sends_before_receives() -> None:
    """Receives posted first let Open MPI over TCP queue a rank's rendezvous ACK behind
    its partner's data (the exchange's two directions then run one after the other):
    every way the cpu transport posts puts the sends first."""
    from commbench.harness.backends.cpu import CpuTransport

    log = _PostLog()
    transport, buf = CpuTransport(log), np.zeros(8, np.uint8)
    posts = {
        "start": lambda: transport.start([(1, buf)], [(2, buf)]),
        "plan": lambda: transport.plan([(1, buf)], [(2, buf)]),
        "start_ranges": lambda: transport.start_ranges(
            [buf], ([1], [0], [0], [4]), ([2], [0], [4], [8])
        ),
    }
    for name, post in posts.items():
        log.posts.clear()
        post()
        assert log.posts == ["send 1", "recv 2"], name


def test_each_launch_has_its_own_id_and_a_job_shares_its_run_id(monkeypatch):
    from commbench.harness import results

    monkeypatch.delenv("COMMBENCH_RUN_ID", raising=False)
    ids = [results.new_launch_id() for _ in range(3)]  # one process, one second
    assert len(set(ids)) == 3 and results.new_run_id(ids[0]) == ids[0]
    monkeypatch.setenv("COMMBENCH_RUN_ID", "job-7")
    assert results.new_run_id(ids[1]) == "job-7"
