"""The cost model of all-gather, reduce-scatter and broadcast: closed forms on a simple
fabric, NCCL's tuning.cc rows, the lower bound, and ``commbench simulate``."""

from __future__ import annotations

import json
import math

import pytest

from commbench.cli import main
from commbench.kernels.model import collectives as model
from commbench.kernels.model import nccl as nccl_table
from commbench.kernels.model.fabric import Fabric

#: 1 GB/s NICs (1000 bytes per µs), 10 GB/s scale-up, latencies 1 and 0.5 µs, stage 2 µs
F = Fabric(gpus_per_node=4, nic_GBps=1.0, nic_us=1.0, scaleup_GBps=10.0, scaleup_us=0.5,
           stage_us=2.0)  # fmt: skip


def test_ring_is_p_minus_one_steps_on_the_slowest_link():
    n = 64_000
    one_node = model.predict("allgather", "ring", n, 1, F).time_us
    assert one_node == pytest.approx(2.0 + 3 * (0.5 + n / 4 / 10e3))
    two_nodes = model.predict("reducescatter", "ring", n, 2, F).time_us
    assert two_nodes == pytest.approx(2.0 + 7 * (1.0 + n / 8 / 1e3))  # reduce_GBps is free


def test_doubling_crosses_the_nics_once_the_distance_reaches_a_node():
    n = 64_000
    t = model.predict("allgather", "recursive-doubling", n, 2, F).time_us
    steps = [(1, 0.5 + n / 8 / 10e3), (2, 0.5 + 2 * n / 8 / 10e3), (4, 1.0 + 4 * n / 8 / 1e3)]
    assert t == pytest.approx(2.0 + sum(c for _, c in steps))
    with pytest.raises(ValueError, match="power-of-two rank count, not 12"):
        model.predict("reducescatter", "recursive-halving", n, 3, F)


def test_tree_broadcast_pipelines_chunks_down_the_levels():
    n, chunk = 400_000, 100_000
    t = model.predict("broadcast", "tree", n, 2, F, chunk_bytes=chunk).time_us
    # 4 chunks, depth 3; the root sends each chunk to 1 node (NIC) and 2 peers (scale-up)
    step = max(1.0 + chunk / 1e3, 0.5 + 2 * chunk / 10e3)
    assert t == pytest.approx(2.0 + (4 + 3 - 1) * step)
    fewer = model.predict("broadcast", "tree", n, 2, F, chunk_bytes=n).time_us
    assert fewer > t  # one chunk: no pipelining


def test_lower_bound_holds_for_every_algorithm():
    for coll, algos in model.ALGORITHMS.items():
        for nodes in (1, 2, 4, 8):
            for n in (1 << 10, 1 << 20, 1 << 26):
                for algo in algos:
                    if algo.startswith("recursive") and nodes * 4 & (nodes * 4 - 1):
                        continue
                    pred = model.predict(coll, algo, n, nodes, F.with_(msg_us=0.5, proxy_us=1.0))
                    assert pred.time_us >= pred.lower_bound_us * (1 - 1e-9), (coll, algo, nodes, n)


def test_nccl_rows_are_tuning_cc():
    """AllGather on 2 nodes x 8 GPUs, Simple: baseLat 8.4, 14 NVLink hops of 3.4 and one
    network hop of 9.6; algbw = bus x 16/15."""
    lat, bw_us = nccl_table.coll_estimate_terms("allgather", 1 << 24, 2, 8, 100.0, "Simple")
    assert lat == pytest.approx(8.4 + 14 * 3.4 + 1 * 9.6)
    assert bw_us == pytest.approx((1 << 24) / (1000 * 100.0 * 16 / 15))
    # LL on one node: a third of the bus; LL128 capped at 18.3 GB/s per channel (16 channels)
    _, ll = nccl_table.coll_estimate_terms("reducescatter", 1 << 20, 1, 8, 300.0, "LL")
    assert ll == pytest.approx((1 << 20) / (1000 * 300.0 / 3 * 8 / 7))
    _, ll128 = nccl_table.coll_estimate_terms("allgather", 1 << 20, 1, 8, 1000.0, "LL128")
    assert ll128 == pytest.approx((1 << 20) / (1000 * 18.3 * 16 * 8 / 7))
    # Broadcast: nsteps = P, one hop with duplicated channels, P hops otherwise
    same, _ = nccl_table.coll_estimate_terms("broadcast", 1 << 20, 2, 4, 100.0, "Simple")
    other, _ = nccl_table.coll_estimate_terms(
        "broadcast", 1 << 20, 2, 4, 100.0, "Simple", same_channels=False
    )
    assert same == pytest.approx(8.4 + 9.6) and other == pytest.approx(8.4 + 8 * 50.0)
    proto, est = nccl_table.coll_choose("allgather", 1 << 10, 2, 8, 100.0)
    assert proto == "LL" and set(est) == {"ring/LL", "ring/LL128", "ring/Simple"}


@pytest.mark.parametrize("coll", sorted(model.ALGORITHMS))
def test_simulate_writes_modelled_records(tmp_path, capsys, coll):
    out = tmp_path / "m.jsonl"
    argv = ["simulate", coll, "--system", "h200", "--nodes", "2,4", "-b", "1M", "-e", "4M",
            "-f", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "MODELLED" in text
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["impl"] for r in recs} == set(model.ALGORITHMS[coll])
    assert all(r["modelled"] and r["collective"] == coll for r in recs)
    factor = 1.0 if coll == "broadcast" else 15 / 16
    r = next(r for r in recs if r["nodes"] == 2)
    assert r["busbw_factor"] == pytest.approx(factor) and math.isfinite(r["time_us"])


def test_simulate_chunk_bytes_is_broadcast_only(capsys):
    args = ["--system", "h200", "--nodes", "2", "--size", "1M"]
    assert main(["simulate", "broadcast", *args, "--param", "chunk_bytes=65536"]) == 0
    capsys.readouterr()
    assert main(["simulate", "allgather", *args, "--param", "chunk_bytes=65536"]) == 2
    assert "broadcast takes chunk_bytes" in capsys.readouterr().err
