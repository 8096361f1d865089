"""Where the bytes went (commbench.analysis.tiers): per-tier bytes of hand-computed
matrices (uniform, one hot pair, the MoE trace) on 2x4 and 4x2, routes, rates, bounds."""

from __future__ import annotations

import numpy as np
import pytest

from commbench.analysis import tiers

LAYOUTS = [(2, 4), (4, 2)]  # nodes x GPUs per node


def by_loops(h: np.ndarray, node_of) -> dict:
    """The tier bytes the plain way: every pair, one at a time."""
    p = h.shape[0]
    tx, rx, up_tx, up_rx, link, cross = [0.0] * p, [0.0] * p, [0.0] * p, [0.0] * p, 0.0, 0.0
    for u in range(p):
        for v in range(p):
            if u == v:
                continue
            if node_of[u] != node_of[v]:
                tx[u] += h[u, v]
                rx[v] += h[u, v]
                cross += h[u, v]
            else:
                up_tx[u] += h[u, v]
                up_rx[v] += h[u, v]
                link = max(link, h[u, v])
    return {
        "nic_bytes": max(max(tx), max(rx)),
        "scaleup_bytes": max(max(up_tx), max(up_rx)),
        "scaleup_link_bytes": link,
        "cross_node_bytes": cross,
    }


@pytest.mark.parametrize("nodes,g", LAYOUTS)
def test_uniform_traffic_by_hand(nodes, g):
    p, per = nodes * g, 1000
    d = np.full((p, p), per, dtype=np.int64)
    h, routing = tiers.alltoallv_hops(d, g, "fanout")
    got = tiers.tier_bytes(h, tiers.node_map(p, g))
    remote, local = p - g, g - 1  # peers on other nodes, on the same node
    assert routing == "direct"
    assert got == {
        "nic_bytes": remote * per,  # each NIC sends and receives to every remote rank
        "scaleup_bytes": local * per,
        "scaleup_link_bytes": per,
        "cross_node_bytes": p * remote * per,
    }


@pytest.mark.parametrize("nodes,g", LAYOUTS)
def test_one_hot_pair_by_hand(nodes, g):
    p = nodes * g
    d = np.zeros((p, p), dtype=np.int64)
    d[1, p - 1] = 6_000_000  # rank 1 (node 0) to the last rank (the last node)
    node_of = tiers.node_map(p, g)
    got = tiers.tier_bytes(tiers.alltoallv_hops(d, g, "fanout")[0], node_of)
    assert got == {
        "nic_bytes": 6e6,
        "scaleup_bytes": 0.0,
        "scaleup_link_bytes": 0.0,
        "cross_node_bytes": 6e6,
    }
    # PXN: over scale-up to the destination's rail on the sender's node, then that rail
    pxn = tiers.tier_bytes(tiers.alltoallv_hops(d, g, "pxn")[0], node_of)
    relay = 6e6 if 1 % g != (p - 1) % g else 0.0  # 2x4: 1 -> 3 first; 4x2: same rail
    assert pxn["nic_bytes"] == 6e6 and pxn["scaleup_bytes"] == relay
    # FAST balances the pair's bytes over the node's G NICs: each carries a G-th
    fast = tiers.tier_bytes(tiers.alltoallv_hops(d, g, "fast")[0], node_of)
    assert fast["nic_bytes"] == pytest.approx(6e6 / g, abs=g)
    assert fast["cross_node_bytes"] == pytest.approx(6e6, abs=g)


def moe_trace_8() -> np.ndarray:
    """The shipped Megatron MoE trace's first matrix (32 ranks), folded to 8 ranks (four
    neighbouring ranks as one), as bytes of 4 KiB tokens."""
    from commbench.harness.workloads import generate

    tokens = generate("trace:moe-megatron-4x8,hidden=2048,dtype=2", 32, 1 << 20)
    return tokens.reshape(8, 4, 8, 4).sum(axis=(1, 3))


@pytest.mark.parametrize("nodes,g", LAYOUTS)
@pytest.mark.parametrize("impl", ["fanout", "pxn", "deepep", "fast", "balance-only"])
def test_moe_trace_against_the_pair_by_pair_sum(nodes, g, impl):
    d = moe_trace_8()
    p = nodes * g
    node_of = tiers.node_map(p, g)
    h, _ = tiers.alltoallv_hops(d, g, impl)
    assert tiers.tier_bytes(h, node_of) == pytest.approx(by_loops(h, node_of))
    # every route delivers the same bytes across nodes (FAST: up to its rounding); the
    # hops only add scale-up forwarding
    direct = by_loops(tiers.alltoallv_hops(d, g, "fanout")[0], node_of)
    assert by_loops(h, node_of)["cross_node_bytes"] == pytest.approx(
        direct["cross_node_bytes"], rel=1e-3
    )
    if impl in ("fast", "balance-only"):  # balanced: no NIC above the busiest node's share
        blocks = d.reshape(nodes, g, nodes, g).sum(axis=(1, 3))
        off = blocks - np.diag(np.diag(blocks))
        fair = max(off.sum(axis=0).max(), off.sum(axis=1).max()) / g
        assert by_loops(h, node_of)["nic_bytes"] <= max(
            fair * 1.001 + g * nodes, direct["nic_bytes"]
        )


@pytest.mark.parametrize("nodes,g", LAYOUTS)
def test_allreduce_routes_by_hand(nodes, g):
    p, n = nodes * g, 1 << 20
    node_of = tiers.node_map(p, g)

    def tb(impl):
        return tiers.tier_bytes(tiers.allreduce_hops(n, p, g, impl)[0], node_of)

    # flat ring in rank order: one hop per node boundary, 2(P-1)/P n each
    assert tb("ring")["nic_bytes"] == pytest.approx(2 * (p - 1) / p * n)
    # NVRAR: n/G to each peer twice inside the node; recursive doubling of n/G per rail
    assert tb("nvrar")["scaleup_link_bytes"] == pytest.approx(2 * n / g)
    assert tb("nvrar")["nic_bytes"] == pytest.approx(np.log2(nodes) * n / g)
    # NCCL and others: the hierarchical pattern, a ring of n/G between nodes per rail
    assert tb("nccl")["nic_bytes"] == pytest.approx(2 * (nodes - 1) / nodes * n / g)
    # recursive doubling: log2 P exchanges of n, log2(nodes) of them across nodes
    assert tb("recursive-doubling")["nic_bytes"] == pytest.approx(np.log2(nodes) * n)


def test_rates_fractions_and_the_lower_bound():
    p, g = 16, 8
    d = np.full((p, p), 1 << 20, dtype=np.int64)
    rec = {"collective": "alltoallv", "nranks": p, "gpus_per_node": g, "impl": "fanout",
           "size_bytes": p << 20, "time_us": 1000.0, "system": "h200", "dtype": "float32"}  # fmt: skip
    t = tiers.record_tiers(rec, d)
    nic = 8 << 20  # 8 remote ranks x 1 MiB
    assert t["nic_bytes"] == nic and t["nic_GBps"] == pytest.approx(nic / 1e9 / 1e-3, rel=1e-5)
    assert t["nic_line_GBps"] == 48.9 and t["rates_from"] == "profile h200"
    assert t["nic_fraction"] == pytest.approx(t["nic_GBps"] / 48.9, rel=1e-5)  # 6 digits kept
    assert t["lower_bound_us"] == pytest.approx(nic / 48.9e3, rel=1e-5)  # the NIC tier
    assert t["time_over_lb"] == pytest.approx(1000.0 / t["lower_bound_us"], rel=1e-5)
    # no profile, no fabric: bytes and rates only
    bare = tiers.record_tiers(dict(rec, system="somewhere"), d)
    assert bare["nic_fraction"] is None and bare["lower_bound_us"] is None
    assert bare["nic_GBps"] == t["nic_GBps"]
    # the emulated cluster's NICs win over a profile
    emu = dict(rec, emulated_fabric={"nic_GBps": 0.0125, "shm_GBps": 2.0})
    assert tiers.record_tiers(emu, d)["rates_from"] == "emulated cluster NIC"
    # an all-to-allv without its matrix has none; an all-reduce or all-to-all needs none
    assert tiers.record_tiers(rec) is None
    assert tiers.record_tiers(dict(rec, collective="allreduce", impl="nvrar")) is not None
    assert tiers.record_tiers(dict(rec, collective="alltoall"))["nic_bytes"] == nic
