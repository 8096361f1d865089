"""``commbench calibrate``: the fit, the profile it writes (every constant measured) and
its raw points; the profile path in ``simulate`` and ``run --system``; the models it
feeds (``fabric_GBps``, Open MPI's algorithms, ``fast+sched``'s per-call costs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.cli import main
from commbench.jobs.profile import load_system, parse_profile
from commbench.kernels.model import Fabric
from commbench.kernels.model import allreduce as ar_model
from commbench.kernels.model import alltoallv as a2a_model
from commbench.kernels.model import fabric as fab
from commbench.kernels.model.fabric_table import FABRIC_CONSTANTS, FabricTable
from commbench.model import calibrate as cal
from commbench.model.simulate import fabric_from_profile
from tests.mpirun import run_mpi

RUN = "calibrate-test"


def points(
    lat=100.0,
    nic=0.0125,
    cap=None,
    incast=0.1,
    msg=20.0,
    stage=500.0,
    g=2,
    p=4,
    put=30.0,
    flows=None,
    exchange=None,
    put_exchange=None,
    burst=None,
    held=None,
    queue=None,
    chain=(60.0, 150.0),
    ring=(45.0, 80.0),
):
    """Raw points of a fabric with these constants (what :func:`cal.measure` would see);
    ``chain``: a butterfly step and what its call pays once; ``ring``: the same of a
    ring's step."""
    s = 1 << 20

    def q(kind, tier, peers, nbytes, us):
        return dict(kind=kind, tier=tier, peers=peers, bytes=nbytes, reps=3, time_us=us,
                    GBps=nbytes / us / 1e3 if nbytes else None)  # fmt: skip

    allnics = s / (cap / p * 1e3) if cap else s / (nic * 1e3)
    out = [
        q("pingpong", "scaleup", 1, 8, 5.0),
        q("pingpong-all", "scaleup", g, 8, 6.0),
        q("stream", "scaleup", 1, s, 2 * 5.0 + s / 2e3),  # 2 GB/s
        q("pingpong", "scaleout", 1, 8, lat / 2),
        q("pingpong-all", "scaleout", p, 8, lat),
        q("stream", "scaleout", 1, s, lat + s / (nic * 1e3)),  # at the rate, bucket or not
        q("allnics", "scaleout", p, s, lat + allnics),
    ]
    t1 = 65536 / (nic * 1e3)
    out += [q("incast", "scaleout", k, 65536, k * t1 * (1 + incast * (k - 1))) for k in (1, 2)]
    out.append(q("stage", "scaleout", p, 0, lat + 2 * msg + stage))
    if chain is not None:  # 2 nodes: chains of 1 and 2 steps
        out += [q("chain", "scaleout", k, 0, chain[1] + k * chain[0]) for k in (1, 2)]
    if ring is not None:  # p ranks: rings of p - 1 and 2 (p - 1) steps
        out += [q("ring", "scaleout", k, 0, ring[1] + k * ring[0]) for k in (p - 1, 2 * p - 2)]
    out += [q("post", "scaleout", n, 8 * n, 300 + msg * n) for n in cal.POST_COUNTS]
    out.append(q("reduce", "local", 1, s, s / 1e3))  # 1 GB/s
    if put is not None:
        out.append(q("put", "scaleout", p, 8, lat + put))
    if exchange is not None:  # every rank exchanging with one peer at `exchange` GB/s each way
        out.append(q("exchange", "scaleout", p, s, lat + s / (exchange * 1e3)))
    if put_exchange is not None:  # cells put both ways at once at `put_exchange` GB/s
        out.append(q("put-exchange", "scaleout", p, s, lat + s / (put_exchange * 1e3)))
    if burst is not None:  # a token bucket of `burst` bytes, full after the idle
        woken = 4 * lat  # a round trip woken from idle costs more than a busy one
        out += [q("burst", "scaleout", 1, b, woken + max(b - burst, 0) / (nic * 1e3))
                for b in cal.burst_sizes(s)]  # fmt: skip
    if held is not None:  # `held` bytes still on their way when the send returned
        out.append(q("release", "scaleout", 1, cal.RELEASE_BYTES, lat / 2 + held / (nic * 1e3)))
    if queue is not None:  # `queue` bytes of the first of two messages leave first
        m, r = cal.OVERLAP_BYTES, nic * 1e3
        alone, release = m / r, 5000.0
        left = m - r * release
        out += [q("overlap-alone", "scaleout", 1, m, alone),
                q("overlap-release", "scaleout", 2, m, release),
                q("overlap", "scaleout", 2, m, release + (2 * left - queue) / r)]  # fmt: skip
    for k, rate in (flows or {}).items():  # all NICs at `rate` GB/s with k flows each
        out.append(q("flows", "scaleout", k, s, lat + s * p / (rate * 1e3)))
    return out


def test_fit_recovers_the_constants_it_was_given():
    c, why = cal.fit(points(cap=0.02), gpus_per_node=2, nranks=4)
    assert c["scaleout_latency_us"] == pytest.approx(100.0)
    assert c["scaleout_latency_quiet_us"] == pytest.approx(50.0)  # one pair, the rest waiting
    assert c["scaleout_GBps"] == pytest.approx(0.0125, rel=1e-3)
    assert c["scaleup_latency_us"] == pytest.approx(6.0)
    assert c["scaleup_GBps"] == pytest.approx(2.0, rel=1e-3)
    assert c["fabric_GBps"] == pytest.approx(0.02, rel=1e-3)
    assert c["incast"] == pytest.approx(0.1, rel=1e-3)
    assert c["msg_us"] == pytest.approx(20.0, rel=1e-3)
    assert c["stage_cost_us"] == pytest.approx(500.0, rel=1e-3)
    assert c["reduce_GBps"] == pytest.approx(1.0, rel=1e-3)
    assert c["put_us"] == pytest.approx(30.0, rel=1e-3)  # above the two-sided latency
    assert c["butterfly_step_us"] == pytest.approx(60.0, rel=1e-3)
    assert c["butterfly_call_us"] == pytest.approx(150.0, rel=1e-3)
    assert c["ring_step_us"] == pytest.approx(45.0, rel=1e-3)
    assert c["ring_call_us"] == pytest.approx(80.0, rel=1e-3)
    assert set(why) == set(c)
    # raw points of a calibrate before the chain and ring points: the model's empty round
    c, _ = cal.fit(points(chain=None, ring=None), gpus_per_node=2, nranks=4)
    assert not {"butterfly_step_us", "butterfly_call_us", "ring_step_us", "ring_call_us"} & set(c)
    # raw points of a calibrate before the put point: no put_us (the model's 0)
    c, _ = cal.fit(points(put=None), gpus_per_node=2, nranks=4)
    assert "put_us" not in c
    assert "fabric_flows_GBps" not in c  # no flows points, or none below the NICs' sum
    c, why = cal.fit(points(cap=0.02, flows={2: 0.015}), gpus_per_node=2, nranks=4)
    assert c["fabric_flows_GBps"] == [[1, pytest.approx(0.02, rel=1e-3)],
                                      [2, pytest.approx(0.015, rel=1e-3)]]  # fmt: skip
    assert "k = 1, 2" in why["fabric_flows_GBps"]
    # NICs that together reach their sum: the fabric has no cap of its own
    c, _ = cal.fit(points(), gpus_per_node=2, nranks=4)
    assert "fabric_GBps" not in c
    assert "exchange_GBps" not in c  # no exchange point
    c, why = cal.fit(points(exchange=0.0075), gpus_per_node=2, nranks=4)
    assert c["exchange_GBps"] == pytest.approx(0.0075, rel=1e-3)
    assert "both directions" in why["exchange_GBps"]
    # an exchange as fast as a one-way stream: no limit of its own
    c, _ = cal.fit(points(exchange=0.0125), gpus_per_node=2, nranks=4)
    assert "exchange_GBps" not in c
    # ... nor one as fast as a one-way stream gets with every rank streaming (allnics:
    # the fabric cap's share), though below a lone stream
    c, _ = cal.fit(points(cap=0.04, exchange=0.0098), gpus_per_node=2, nranks=4)
    assert c["fabric_GBps"] == pytest.approx(0.04, rel=1e-3) and "exchange_GBps" not in c
    c, why = cal.fit(points(cap=0.04, exchange=0.008), gpus_per_node=2, nranks=4)
    assert c["exchange_GBps"] == pytest.approx(0.008, rel=1e-3)
    assert "allnics" in why["exchange_GBps"]
    c, why = cal.fit(points(put_exchange=0.01), gpus_per_node=2, nranks=4)
    assert c["put_exchange_GBps"] == pytest.approx(0.01, rel=1e-3)
    assert "NVRAR" in why["put_exchange_GBps"]


@pytest.mark.parametrize("apart", [True, False])
def test_an_exchange_is_capped_only_beyond_the_passes_spread(apart):
    """q23ar's 8x1 calibration kept an exchange 6 % below the all-NICs stream whose passes
    overlapped its own (106-111 against 99-108 ms); the model's exchanges then ran
    1.10-1.18 slow. Below it by more than the passes' spread: kept; within it: noise."""
    raw = points(cap=0.04, exchange=0.0085)  # 6 % below allnics' 0.01 a rank
    for q in raw:
        if q["kind"] in ("allnics", "exchange"):
            t = q["time_us"]
            spread = (0.97, 1.0, 1.03) if apart else (0.9, 1.0, 1.1)
            q["passes_us"] = [t * f for f in spread]
    c, why = cal.fit(raw, gpus_per_node=2, nranks=4)
    if apart:
        assert c["exchange_GBps"] == pytest.approx(0.0085, rel=1e-3)
        assert "beyond their passes' spread" in why["exchange_GBps"]
    else:
        assert "exchange_GBps" not in c


def test_a_token_bucket_shows_as_free_bytes_at_both_burst_sizes():
    c, why = cal.fit(points(burst=15000), gpus_per_node=2, nranks=4)
    assert c["scaleout_burst_bytes"] == pytest.approx(15000, rel=1e-3)
    assert "8, 65536, 262144" in why["scaleout_burst_bytes"]
    assert "scaleout_burst_bytes" not in cal.fit(points(), 2, 4)[0]  # no burst points
    # a NIC that sends every byte at its rate: no bucket
    assert "scaleout_burst_bytes" not in cal.fit(points(burst=0), 2, 4)[0]
    # a bucket deeper than the smaller message: the sizes disagree, nothing is claimed
    assert "scaleout_burst_bytes" not in cal.fit(points(burst=100_000), 2, 4)[0]
    # the profile carries it to the model, per NIC
    table = FabricTable(scaleup="x", scaleup_GBps=1.0, scaleup_peer_GBps=1.0,
                        scaleup_latency_us=1.0, scaleout="y", scaleout_GBps=0.0125,
                        scaleout_latency_us=100.0, nics_per_node=2, stage_cost_us=0.0,
                        scaleout_burst_bytes=15000.0)  # fmt: skip
    assert table.per_gpu(2).nic_burst_bytes == 15000.0
    assert table.per_gpu(4).nic_burst_bytes == 7500.0  # two NICs shared by four GPUs


def test_the_profile_is_a_shipped_format_profile_with_every_constant_measured(tmp_path):
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile

    base = load_toml(load_profile("local-cluster").path)
    c, why = cal.fit(points(cap=0.02), gpus_per_node=2, nranks=4)
    data = cal.profile_data(base, "mine", c, why, RUN, 2, "lossy")
    text = cal.dump_toml(data, header="a header\nof two lines")
    path = tmp_path / "mine.toml"
    path.write_text(text)
    prof = parse_profile(tomllib.loads(text), path)
    assert prof.name == "mine" and prof.devices.gpus_per_node == 2
    assert prof.launch == load_profile("local-cluster").launch  # the launcher is kept
    fab = prof.fabric
    assert fab.flow_control == "lossy" and fab.incast_lossy == c["incast"]
    present = [k for k in FABRIC_CONSTANTS if getattr(fab, k) is not None]
    assert "fabric_GBps" in present and "put_us" in present
    for key in present:
        assert fab.sources[key].startswith(f"measured: {RUN}: "), key
    f = fabric_from_profile(str(path))
    assert f.fabric_GBps == pytest.approx(0.02) and f.incast == pytest.approx(0.1)
    assert f.nic_quiet_us == pytest.approx(50.0) and f.nic_us == pytest.approx(100.0)
    assert load_system(str(path)).name == "mine"


def test_simulate_after_rest_models_the_first_call_with_every_bucket_full(tmp_path, capsys):
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile

    base = load_toml(load_profile("local-cluster").path)
    c, why = cal.fit(points(burst=15000), gpus_per_node=2, nranks=4)
    path = tmp_path / "mine.toml"
    path.write_text(cal.dump_toml(cal.profile_data(base, "mine", c, why, RUN, 2, "lossless")))
    times = {}
    for flags in ([], ["--after-rest"]):
        out = tmp_path / f"model{len(flags)}.jsonl"
        argv = ["simulate", "allreduce", "--system", str(path), "--nodes", "2", "--impls",
                "recursive-doubling,ring,nccl", "--size", "64K", "--out", str(out), *flags]  # fmt: skip
        assert main(argv) == 0
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        times[bool(flags)] = {r["impl"]: (r["time_us"], r["info"]["call"]) for r in recs}
    header = capsys.readouterr().out
    assert header.count("the first call after a rest") == 1 and "15000 B a NIC" in header
    for impl in ("recursive-doubling", "ring"):  # 64 KiB drains a 15 KB bucket every call
        assert times[True][impl][0] < times[False][impl][0]
        assert (times[False][impl][1], times[True][impl][1]) == ("timed loop", "after a rest")
    assert times[True]["nccl"][0] == times[False]["nccl"][0]  # its model keeps no bucket
    assert main(["simulate", "alltoallv", "--system", str(path), "--after-rest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--after-rest applies to all-reduce" in err[0]


def test_toml_writer_round_trips_what_profiles_hold():
    data = {"a": 1, "b": 2.5, "c": "x \"quoted\" \\ y", "d": [1, "two"], "e": True,
            "t": {"k": float("inf"), "inline": {"x": 1}, "sub": {"z": "deep"}},
            "dotted.key": {"v": 0}}  # fmt: skip
    back = tomllib.loads(cal.dump_toml(data))
    assert back["t"]["k"] == math.inf and back["c"] == data["c"] and back["t"]["sub"]["z"] == "deep"
    assert back["dotted.key"] == {"v": 0} and back["d"] == [1, "two"]


def test_the_put_point_pairs_ranks_as_nvrar_s_inter_node_steps():
    # node n ^ 2^k at the same local index, step by step; nodes beyond the largest power
    # of two only fold in and out, so they take no step
    assert cal.butterfly_partners(5, 4, 2) == [7, 1]  # node 2, local 1: nodes 3, 0
    assert cal.butterfly_partners(0, 8, 1) == [1, 2, 4]
    assert cal.butterfly_partners(2, 3, 1) == []
    for r in range(8):  # every step pairs ranks both ways
        for k, peer in enumerate(cal.butterfly_partners(r, 4, 2)):
            assert cal.butterfly_partners(peer, 4, 2)[k] == r


def test_busy_pairs_keep_every_rank_paired_once():
    for p, g, tier in (
        (8, 4, "scaleup"),
        (8, 4, "scaleout"),
        (8, 1, "scaleout"),
        (6, 3, "scaleup"),
    ):
        pairs = cal.busy_pairs(p, g, tier)
        ranks = [r for pair in pairs for r in pair]
        assert len(ranks) == len(set(ranks))
        for a, b in pairs:
            assert (a // g == b // g) == (tier == "scaleup")
    assert len(cal.busy_pairs(8, 4, "scaleout")) == 4


def test_a_send_that_returns_early_gives_its_buffer_and_what_it_queues_ahead():
    c, why = cal.fit(points(held=900_000, queue=200_000), gpus_per_node=2, nranks=4)
    assert c["scaleout_send_buffer_bytes"] == pytest.approx(900_000, rel=1e-3)
    assert c["scaleout_queue_bytes"] == pytest.approx(200_000, rel=1e-3)
    assert "before the message arrived" in why["scaleout_send_buffer_bytes"]
    assert "as if 200000 B of it left ahead of the second" in why["scaleout_queue_bytes"]
    # a send that returns when its message is through (RDMA): neither constant
    c, _ = cal.fit(points(held=1000, queue=200_000), gpus_per_node=2, nranks=4)
    assert "scaleout_send_buffer_bytes" not in c and "scaleout_queue_bytes" not in c
    # calibrations before these points, or without a second rank to send to: none / one
    assert "scaleout_send_buffer_bytes" not in cal.fit(points(), 2, 4)[0]
    c, _ = cal.fit(points(held=900_000), gpus_per_node=2, nranks=4)
    assert "scaleout_queue_bytes" not in c and c["scaleout_send_buffer_bytes"] > 0
    # slower than an even split: nothing ahead; the second waited: all the first had left
    c, _ = cal.fit(points(held=900_000, queue=-50_000), gpus_per_node=2, nranks=4)
    assert c["scaleout_queue_bytes"] == 0
    left = cal.OVERLAP_BYTES - 0.0125e3 * 5000.0
    c, _ = cal.fit(points(held=900_000, queue=1.5 * left), gpus_per_node=2, nranks=4)
    assert c["scaleout_queue_bytes"] == pytest.approx(left, rel=1e-3)
    # the profile carries both into the model's fabric
    table = FabricTable(scaleup="x", scaleup_GBps=1.0, scaleup_peer_GBps=1.0,
                        scaleup_latency_us=1.0, scaleout="y", scaleout_GBps=0.0125,
                        scaleout_latency_us=100.0, nics_per_node=2, stage_cost_us=0.0,
                        scaleout_send_buffer_bytes=9e5, scaleout_queue_bytes=2e5)  # fmt: skip
    fab = table.per_gpu(2)
    assert fab.nic_send_buffer_bytes == 9e5 and fab.nic_queue_bytes == 2e5


def test_calibrate_under_mpiexec_writes_profile_and_points(tmp_path):
    out = tmp_path / "cal" / "here.toml"
    proc = run_mpi(4, ["-m", "commbench", "calibrate", "--gpus-per-node", "2", "--out", str(out),
                       "--bytes", "64K", "--fabric-bytes", "32K,256K", "--incast-bytes", "16K",
                       "--reps", "2", "--passes", "2", "--stage-rounds", "4"], timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    prof = parse_profile(tomllib.loads(out.read_text()), out)
    assert prof.devices.gpus_per_node == 2 and prof.fabric.nics_per_node == 2
    run = prof.fabric.sources["scaleout_GBps"].split(":")[1].strip()
    assert run.startswith("calibrate-")
    df = pd.read_json(cal.points_path(out), lines=True)
    assert set(cal.POINT_KEYS) <= set(df.columns) and (df["run"] == run).all()
    kinds = set(df["kind"])
    assert {"pingpong", "pingpong-all", "stream", "allnics", "incast", "stage", "chain", "ring", "post",
            "put", "flows", "exchange", "put-exchange", "burst", "eager", "reduce", "release",
            "overlap-alone", "overlap-release", "overlap"} <= kinds  # fmt: skip
    assert prof.fabric.put_us is not None and prof.fabric.put_us >= 0
    assert (df["time_us"] >= 0).all() and (df[df["kind"] != "release"]["time_us"] > 0).all()
    assert (df["passes_us"].map(len) == 2).all()  # each point the median of its passes
    # the ring's steps carry a message (an empty one is cheaper inside a node)
    assert set(df[df["kind"] == "ring"]["bytes"]) == {cal.RING_MESSAGE_BYTES}
    for kind in ("allnics", "flows"):  # at --bytes and at each --fabric-bytes
        assert set(df[df["kind"] == kind]["bytes"]) == {32 << 10, 64 << 10, 256 << 10}
    # each flows point keeps every rank's time in every round of every pass
    rounds = df[df["kind"] == "flows"]["rank_rounds_us"]
    assert rounds.map(lambda r: np.shape(r) == (4, 2 * 2)).all()
    assert df[df["kind"] != "flows"]["rank_rounds_us"].isna().all()
    spread = df[df["kind"].isin(["allnics", "nics", "flows"])]
    assert list(df[df["kind"] == "nics"]["peers"]) == [2]  # 2 of 4 NICs (4: allnics)
    assert (spread["median_rank_us"] > 0).all()  # the median rank's time beside the slowest
    assert (spread["median_rank_us"] <= spread["time_us"] * 1.001).all()
    assert (spread["passes_median_rank_us"].map(len) == 2).all()
    assert df[~df.index.isin(spread.index)]["median_rank_us"].isna().all()
    # the profile drives the model and the run (FAST's stage cost, said in the record)
    model = tmp_path / "model.jsonl"
    assert main(["simulate", "alltoallv", "--system", str(out), "--servers", "2", "--size",
                 "64K", "--impls", "fanout,mpi,fast+sched", "--no-tune", "--out", str(model)]) == 0  # fmt: skip
    recs = [json.loads(line) for line in model.read_text().splitlines()]
    assert [r["impl"] for r in recs] == ["fanout", "mpi", "fast+sched"]
    assert recs[0]["system"] == str(out) and recs[2]["info"]["call"]["call_us"] > 0
    rec_path = tmp_path / "run.jsonl"
    proc = run_mpi(4, ["-m", "commbench", "run", "alltoallv", "--impl", "fast",
                       "--gpus-per-node", "2", "-b", "16K", "-e", "16K", "-n", "2", "-w", "1",
                       "--system", str(out), "--out", str(rec_path)], timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(rec_path.read_text().splitlines()[-1])
    expected = fabric_from_profile(str(out)).stage_cost_bytes
    assert rec["params"]["stage_cost_bytes"] == expected
    assert rec["info"]["stage_cost"]["bytes"] == expected
    assert str(out) in rec["info"]["stage_cost"]["source"] and rec["nwrong"] == 0
    # --update: only a step's fixed costs measured again, on the same shape
    again = tmp_path / "cal" / "again.toml"
    proc = run_mpi(4, ["-m", "commbench", "calibrate", "--gpus-per-node", "2", "--out",
                       str(again), "--update", str(out), "--reps", "2", "--passes", "1",
                       "--stage-rounds", "4"], timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    newer = parse_profile(tomllib.loads(again.read_text()), again)
    run2 = newer.fabric.sources["stage_cost_us"].split(":")[1].strip()
    assert run2.startswith("calibrate-") and run2 != run
    assert newer.fabric.sources["scaleout_GBps"] == prof.fabric.sources["scaleout_GBps"]
    assert newer.fabric.scaleout_GBps == prof.fabric.scaleout_GBps
    rows = pd.read_json(cal.points_path(again), lines=True)
    assert set(rows[rows["run"] == run2]["kind"]) == set(cal.STEP_KINDS)
    proc = run_mpi(2, ["-m", "commbench", "calibrate", "--gpus-per-node", "1", "--out",
                       str(tmp_path / "other.toml"), "--update", str(out)], timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "update it on the same shape" in proc.stderr


def test_the_eager_limit_is_the_last_size_a_late_receiver_did_not_hold_up():
    late = cal.EAGER_LATE_S * 1e6

    def eager(tier, times):
        return [dict(kind="eager", tier=tier, peers=1, bytes=b, reps=3, time_us=t, GBps=None)
                for b, t in zip(cal.EAGER_SIZES, times, strict=False)]  # fmt: skip

    quick, held = 0.002 * late, 1.01 * late
    pts = eager("scaleout", [quick] * 6 + [held] * 3) + eager("scaleup", [held] * 9)
    assert cal.eager_limit(pts, "scaleout") == cal.EAGER_SIZES[5] == 32 << 10
    assert cal.eager_limit(pts, "scaleup") == 0
    # a slow small send ends the run of eager sizes: a larger quick one is not trusted
    assert cal.eager_limit(eager("scaleout", [quick, held, quick]), "scaleout") == 1024
    assert cal.eager_limit(points(), "scaleout") is None  # calibrations before the points
    c, why = cal.fit(points() + pts, gpus_per_node=2, nranks=4)
    assert (c["scaleout_eager_bytes"], c["scaleup_eager_bytes"]) == (32 << 10, 0)
    assert "40 ms late" in why["scaleout_eager_bytes"]
    fabric = FabricTable(**{k: v for k, v in c.items() if k != "incast"}, scaleup="u",
                         scaleout="o", sources={}).per_gpu(2)  # fmt: skip
    assert (fabric.nic_eager_bytes, fabric.scaleup_eager_bytes) == (32 << 10, 0)


def test_update_refits_only_a_step_s_fixed_costs():
    """``calibrate --update``: the step points measured again replace the old ones, the
    step constants are fitted from them (sources naming the new run), every other
    constant and source stays as the profile had it."""
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile

    old = [{"run": "r0", **q} for q in points(lat=100.0, msg=20.0, stage=500.0, put=30.0)]
    c, why = cal.fit(old, gpus_per_node=2, nranks=4)
    base = load_toml(load_profile("local-cluster").path)
    data = cal.profile_data(base, "first", c, why, "r0", 2, "lossless")
    fresh = [q for q in points(lat=150.0, msg=30.0, stage=400.0, put=60.0, chain=(80.0, 90.0),
                               ring=(55.0, 65.0))
             if q["kind"] in cal.STEP_KINDS]  # fmt: skip
    new, merged, refit = cal.refresh_steps(data, old, fresh, "r1", "second", 2, 4)
    assert new["name"] == "second" and "(r1)" in new["description"]
    assert set(refit) == set(cal.STEP_KEYS)
    fab, was = new["fabric"], data["fabric"]
    assert fab["scaleout_latency_us"] == pytest.approx(150.0)
    assert fab["msg_us"] == pytest.approx(30.0) and fab["stage_cost_us"] == pytest.approx(400.0)
    assert fab["put_us"] == pytest.approx(60.0)
    assert fab["butterfly_step_us"] == pytest.approx(80.0)
    assert fab["butterfly_call_us"] == pytest.approx(90.0)
    assert fab["ring_step_us"] == pytest.approx(55.0) and fab["ring_call_us"] == pytest.approx(65.0)
    for key in fab:
        if key in cal.STEP_KEYS:
            assert fab["sources"][key].startswith("measured: r1: ")
        elif key != "sources":
            assert fab[key] == was[key] and fab["sources"].get(key) == was["sources"].get(key)
    assert [cal._point_id(q) for q in merged] == [cal._point_id(q) for q in old]
    assert {q["run"] for q in merged if q["kind"] in cal.STEP_KINDS} == {"r1"}
    assert {q["run"] for q in merged if q["kind"] not in cal.STEP_KINDS} == {"r0"}
    parse_profile(tomllib.loads(cal.dump_toml(new)), Path("second.toml"))  # reads back
    assert data["fabric"]["scaleout_latency_us"] == pytest.approx(100.0)  # not modified


def test_update_names_what_is_wrong_with_its_profile(tmp_path, capsys):
    bare = tmp_path / "bare.toml"
    bare.write_text('name = "bare"\n')
    for path, words in ((tmp_path / "none.toml", "no such profile"),
                        (bare, "run a full calibrate first")):  # fmt: skip
        assert main(["calibrate", "--out", str(tmp_path / "x.toml"), "--update", str(path)]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1
    assert not (tmp_path / "x.toml").exists()


_SLOW_READER = """
import sys, time
import numpy as np
from mpi4py import MPI
from commbench.model import calibrate as cal
poll = cal._poll
def slow(win, arrived, pending, deadline, what):
    if MPI.COMM_WORLD.rank == 0:  # reads its cells late: partners run a call ahead
        time.sleep(0.01)
    poll(win, arrived, pending, deadline, what)
cal._poll = slow
secs = cal.put_rounds(MPI.COMM_WORLD, 1, np.dtype(np.float32), 2, 6, timeout_s=20)
print("step", secs)
"""


def test_the_put_point_survives_a_partner_a_call_ahead():
    proc = run_mpi(4, ["-c", _SLOW_READER], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("step") == 4


_FAILING_RANK = """
import sys
from mpi4py import MPI
from commbench.cli import main
from commbench.model import calibrate as cal
poll = cal._poll
def broken(*args):
    if MPI.COMM_WORLD.rank == 1:
        raise RuntimeError("injected failure")
    poll(*args)
cal._poll = broken
sys.exit(main(sys.argv[1:]))
"""


def test_a_failing_rank_ends_calibrate_with_its_message(tmp_path):
    out = tmp_path / "cal.toml"
    proc = run_mpi(4, ["-c", _FAILING_RANK, "calibrate", "--gpus-per-node", "2", "--out",
                       str(out), "--bytes", "16K", "--fabric-bytes", "0", "--incast-bytes",
                       "4K", "--reps", "1", "--passes", "1", "--stage-rounds", "2"],
                   timeout=150)  # fmt: skip
    assert proc.returncode != 0
    assert "rank 1: RuntimeError: injected failure" in proc.stderr
    assert not out.exists() and not cal.points_path(out).exists()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.floats(1.0, 1e6), min_size=3, max_size=3), min_size=1, max_size=5))
def test_each_point_is_the_median_of_its_passes(times):
    """A pass is the same list of points; the combined point's time is the median of its
    passes' (one disturbed pass of three moves nothing), its rate from that time."""
    template = points()[:3]
    passes = [[{**q, "time_us": t} for q, t in zip(template, row, strict=True)] for row in times]
    combined = cal.combine_passes(passes)
    assert [cal._point_id(q) for q in combined] == [cal._point_id(q) for q in template]
    for i, q in enumerate(combined):
        column = [row[i] for row in times]
        assert q["passes_us"] == column and q["time_us"] == pytest.approx(np.median(column))
        assert q["GBps"] == (q["bytes"] / q["time_us"] / 1e3 if q["bytes"] else None)


def test_passes_over_different_points_are_refused():
    pts = points()
    with pytest.raises(ValueError, match="different points"):
        cal.combine_passes([pts, pts[1:]])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "{tmp}/p.txt"], "name the profile NAME.toml"),
        (["--out", "{tmp}/p.toml", "--base", "nope"], "unknown system 'nope'"),
        (["--out", "{tmp}/p.toml", "--reps", "0"], "--reps must be at least 1"),
        (["--out", "{tmp}/p.toml", "--passes", "0"], "--passes must be at least 1"),
        (["--out", "{tmp}/p.toml", "--loss-rounds", "0"], "--loss-rounds must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flow_control, rounds", [("lossy", 12), ("lossless", 3)])
def test_a_lossy_fabric_s_flows_points_take_the_loss_rounds(tmp_path, flow_control, rounds):
    """On a lossy fabric a flows round is late by a timeout or not, and the share late is
    the chance the model charges: those points take ``--loss-rounds`` rounds a pass, the
    others (and every point of a lossless fabric) ``--reps``."""
    import argparse

    p = argparse.ArgumentParser()
    cal.add_arguments(p)
    args = p.parse_args(["--out", str(tmp_path / "p.toml"), "--reps", "3", "--loss-rounds",
                         "12", "--flow-control", flow_control])  # fmt: skip
    _, opts = cal.check_arguments(args)
    assert opts["reps"] == 3 and opts["flows_rounds"] == rounds


def test_simulate_refuses_a_missing_profile_file(tmp_path, capsys):
    assert main(["simulate", "alltoallv", "--system", str(tmp_path / "no.toml")]) == 2
    assert "no such profile file" in capsys.readouterr().err


# ---------------------------------------------------------------- the models it feeds


def fabric(**kw) -> Fabric:
    base = dict(gpus_per_node=2, nic_GBps=0.0125, nic_us=100.0, scaleup_GBps=2.0,
                scaleup_us=5.0)  # fmt: skip
    return Fabric(**{**base, **kw})


def test_the_fabric_cap_binds_a_step_with_many_busy_nics():
    traffic = np.full((8, 8), 1 << 20)
    np.fill_diagonal(traffic, 0)
    free = a2a_model.fanout(traffic, fabric(gpus_per_node=4))
    capped = a2a_model.fanout(traffic, fabric(gpus_per_node=4, fabric_GBps=0.045))
    cross = (1 << 20) * 8 * 4  # every rank sends 4 MiB to the other node
    assert capped.time_us >= cross / (0.045 * 1e3)
    assert capped.time_us > free.time_us
    # one flow alone is not slowed by a cap above one NIC
    single = np.zeros((4, 4), dtype=np.int64)
    single[0, 2] = 1 << 20
    assert a2a_model.fanout(single, fabric(fabric_GBps=0.02)).time_us == pytest.approx(
        a2a_model.fanout(single, fabric()).time_us
    )
    # all-reduce: 8 single-rank nodes exchanging at once share the cap
    one = fabric(gpus_per_node=1, scaleup_GBps=math.inf)
    assert (
        ar_model.ring(1 << 20, 8, one.with_(fabric_GBps=0.03)).time_us
        > ar_model.ring(1 << 20, 8, one).time_us
    )


def test_nics_with_fewer_bytes_leave_the_cap_to_the_busier_ones():
    """Six NICs sending 1052 KiB beside two sending 496 KiB under a cap below the
    eight's sum (the emulated 4x2 cluster's FAST stage): the two end first, at the cap's
    eighth, and the six then run at their own rate; all eight ending at the step's bytes
    over the cap was the model before."""
    big, small, rate, cap = 1052 * 1024, 496 * 1024, 12.06e3, 83.5e3  # bytes per µs
    nb = np.array([big] * 6 + [small] * 2, dtype=np.float64)
    ends = fab.shared_cap_us(nb, nb / rate, cap)
    first = small / (cap / 8)
    assert ends[6:] == pytest.approx([first] * 2)
    assert ends[:6] == pytest.approx([first + (big - small) / rate] * 6)
    assert ends.max() > nb.sum() / cap  # the busiest end after the step's bytes over the cap
    # equal NICs end together at the bytes over the cap, as before; no cap: alone
    even = np.full(8, float(big))
    assert fab.shared_cap_us(even, even / rate, cap) == pytest.approx([8 * big / cap] * 8)
    assert fab.shared_cap_us(nb, nb / rate, 8 * rate) == pytest.approx(nb / rate)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 1 << 22), min_size=1, max_size=12),
    st.lists(st.floats(0.2, 1.0), min_size=12, max_size=12),
    st.floats(0.05, 1.5),
)
def test_shared_cap_is_work_conserving_and_never_faster_than_alone(nbytes, speed, share):
    """No NIC ends before its time alone; the last ends no earlier than all bytes over the
    cap, and no later than its time alone after them; at one rate for all, more bytes
    never end sooner."""
    nb = np.array(nbytes, dtype=np.float64)
    own = 10.0 * np.array(speed[: nb.size])  # bytes per µs
    alone = nb / own
    cap = share * own.sum()
    ends = fab.shared_cap_us(nb, alone, cap)
    assert (ends >= alone * (1 - 1e-9)).all()
    assert ends.max() >= nb.sum() / cap * (1 - 1e-9)
    assert ends.max() <= (alone.max() + nb.sum() / cap) * (1 + 1e-9)
    same = fab.shared_cap_us(nb, nb / 10.0, share * 10.0 * nb.size)
    order = np.argsort(nb, kind="stable")
    assert (np.diff(same[order]) >= -1e-9 * same.max()).all()


def test_an_exchange_is_capped_where_a_one_way_flow_is_not():
    """``exchange_GBps`` slows a flow whose reverse moves in the same step: recursive
    doubling's and Rabenseifner's steps, a FAST stage that swaps two servers; not ring's
    one-way steps, and not fan-out, whose flows share their NICs below the cap."""
    one = fabric(gpus_per_node=1, scaleup_GBps=math.inf)
    slow = one.with_(exchange_GBps=0.006)
    n = 4 << 20
    for algo in (ar_model.recursive_doubling, ar_model.rabenseifner):
        assert algo(n, 8, slow).time_us > 1.5 * algo(n, 8, one).time_us
    assert ar_model.ring(n, 8, slow).time_us == pytest.approx(ar_model.ring(n, 8, one).time_us)
    # all-to-allv: a swap of two ranks vs a one-way shift of the same bytes
    swap = np.zeros((4, 4), dtype=np.int64)
    swap[0, 2] = swap[2, 0] = 1 << 20
    shift = np.zeros((4, 4), dtype=np.int64)
    shift[0, 2] = shift[2, 1] = 1 << 20
    base, capped = fabric(), fabric(exchange_GBps=0.006)
    assert a2a_model.fanout(swap, capped).time_us >= (1 << 20) / (0.006 * 1e3)
    assert a2a_model.fanout(shift, capped).time_us == pytest.approx(
        a2a_model.fanout(shift, base).time_us
    )
    traffic = np.full((8, 8), 1 << 20)
    np.fill_diagonal(traffic, 0)
    wide = fabric(gpus_per_node=2)
    assert a2a_model.fanout(traffic, wide.with_(exchange_GBps=0.009)).time_us == pytest.approx(
        a2a_model.fanout(traffic, wide).time_us
    )
    with pytest.raises(ValueError, match="exchange_GBps"):
        one.with_(exchange_GBps=0.0)
    # NVRAR's steps are puts: their own measured rate where there is one
    puts = slow.with_(put_exchange_GBps=0.012)
    assert ar_model.nvrar(n, 8, puts).time_us < ar_model.nvrar(n, 8, slow).time_us
    assert ar_model.recursive_doubling(n, 8, puts).time_us == pytest.approx(
        ar_model.recursive_doubling(n, 8, slow).time_us
    )


def test_nics_points_are_cycles_of_k_ranks_across_nodes():
    for nodes, g in ((2, 4), (4, 2), (8, 1), (3, 2)):
        p = nodes * g
        assert cal.nic_counts(p) == [k for k in (2, 4, 8, 16) if k < p]
        for k in cal.nic_counts(p):
            cycle = cal.nic_cycle(p, g, k)
            if nodes == 3 and k == 4:  # 0 -> 2 -> 4 -> 1 -> 0: the last hop inside node 0
                assert cycle is None
                continue
            assert len(cycle) == k
            assert sorted(to for to, _ in cycle.values()) == sorted(cycle)  # one in, one out
            assert all(cycle[to][1] == r for r, (to, _) in cycle.items())
            assert all(to // g != r // g for r, (to, _) in cycle.items())
    assert cal.nic_cycle(8, 4, 4) == {0: (4, 5), 4: (1, 0), 1: (5, 4), 5: (0, 1)}


def test_flows_points_give_every_rank_k_remote_peers_and_k_senders():
    for nodes, g in ((2, 4), (4, 2), (8, 1), (3, 2)):
        p = nodes * g
        ks = cal.flow_counts(p - g, nodes)
        assert ks[-1] == p - g and 1 not in ks and ks == sorted(set(ks))
        assert nodes - 1 in ks or nodes - 1 < 2  # the rail fan: one rank of each other node
        for k in ks:
            peers = {r: cal.flow_peers(r, nodes, g, k) for r in range(p)}
            received = np.bincount([d for ds in peers.values() for d in ds], minlength=p)
            assert (received == k).all()
            for r, ds in peers.items():
                assert len(set(ds)) == k and all(d // g != r // g for d in ds)


def test_flows_points_include_the_rail_fan():
    """k = nodes - 1 is a rail all-to-all's step (the rank of its index on every other
    node), measured, not read between its neighbours."""
    assert cal.flow_counts(6, 4) == [2, 3, 4, 6]  # 4x2
    assert cal.flow_counts(4, 2) == [2, 4]  # 2x4: one other node, nothing to add
    assert cal.flow_counts(7, 8) == [2, 4, 7]  # 8x1: the fan is every remote rank
    for r in range(8):
        node, local = divmod(r, 2)
        assert sorted(cal.flow_peers(r, 4, 2, 3)) == sorted(
            n * 2 + local for n in range(4) if n != node
        )


def test_the_cap_follows_the_flows_per_nic():
    traffic = np.full((8, 8), 1 << 20)
    np.fill_diagonal(traffic, 0)
    one_flow = fabric(gpus_per_node=2, fabric_GBps=0.067)
    curve = one_flow.with_(fabric_flows=((1, 0.067), (6, 0.054)))
    assert curve.cap_GBps(1) == pytest.approx(0.067) and curve.cap_GBps(12) == pytest.approx(0.054)
    assert 0.054 < curve.cap_GBps(3) < 0.067
    # fan-out on 4x2: 6 remote flows per NIC, the slower cap binds
    cross = float((1 << 20) * 8 * 6)
    assert a2a_model.fanout(traffic, curve).time_us >= cross / (0.054 * 1e3)
    assert a2a_model.fanout(traffic, curve).time_us > a2a_model.fanout(traffic, one_flow).time_us
    # one flow per NIC per step (spread-out): the one-flow cap, as before
    assert a2a_model.spreadout(traffic, curve).time_us == pytest.approx(
        a2a_model.spreadout(traffic, one_flow).time_us
    )
    with pytest.raises(ValueError, match="increasing flow counts"):
        one_flow.with_(fabric_flows=((2, 0.05), (1, 0.06)))


def test_the_cap_follows_the_bytes_per_nic_between_measured_sizes():
    mib = 1 << 20
    sized = fabric(gpus_per_node=2, fabric_GBps=0.067).with_(
        fabric_flows=((1, 0.067, mib), (6, 0.054, mib), (1, 0.070, 4 * mib), (6, 0.060, 4 * mib))
    )
    assert sized.cap_GBps(6, mib) == pytest.approx(0.054)
    assert sized.cap_GBps(6, 4 * mib) == pytest.approx(0.060)
    assert sized.cap_GBps(6, 2 * mib) == pytest.approx(0.057)  # halfway on a log axis
    assert sized.cap_GBps(6, 64 * mib) == pytest.approx(0.060)  # flat beyond the sizes
    assert sized.cap_GBps(6, 1024) == pytest.approx(0.054)
    assert sized.cap_GBps(6) == pytest.approx(0.054)  # no size: the smallest one's curve
    # a uniform 4 MiB fan-out on 4x2 (3 MiB per NIC crosses) reads between the curves
    traffic = np.full((8, 8), 512 << 10)
    np.fill_diagonal(traffic, 0)
    cross = float((512 << 10) * 8 * 6)
    assert a2a_model.fanout(traffic, sized).time_us >= cross / (sized.cap_GBps(6, 3 * mib) * 1e3)
    assert a2a_model.fanout(traffic, sized).time_us < cross / (0.054 * 1e3)
    # per-flow sizes (an all-reduce step's messages): one cap each
    caps = sized.cap_GBps(1, np.array([mib, 4 * mib]))
    assert caps == pytest.approx([0.067, 0.070])
    # the all-reduce models run on it, between what each size's curve alone gives
    one = {b: fabric(gpus_per_node=2, fabric_GBps=0.067).with_(
        fabric_flows=[(k, r) for k, r, size in sized.fabric_flows if size == b])
        for b in (mib, 4 * mib)}  # fmt: skip
    for model in (ar_model.ring, ar_model.recursive_doubling, ar_model.rabenseifner,
                  ar_model.nvrar, ar_model.mpi):  # fmt: skip
        t = model(2 * mib, 4, sized).time_us
        assert model(2 * mib, 4, one[4 * mib]).time_us <= t <= model(2 * mib, 4, one[mib]).time_us
    for bad in (((1, 0.067, mib), (6, 0.054)), ((1, 0.067, 0),), ((1, 0.067, mib, 1),)):
        with pytest.raises(ValueError, match="triples"):
            sized.with_(fabric_flows=bad)


def test_fit_writes_one_flows_curve_per_measured_size():
    mib = 1 << 20
    pts = points(cap=0.02, flows={2: 0.015})
    lat = next(q for q in pts if q["kind"] == "pingpong-all" and q["tier"] == "scaleout")
    for k, rate in ((1, 0.022), (2, 0.018)):  # the same points at 4 MiB per rank
        kind, peers = ("allnics", 4) if k == 1 else ("flows", k)
        us = lat["time_us"] + 4 * mib * 4 / (rate * 1e3)
        pts.append(dict(kind=kind, tier="scaleout", peers=peers, bytes=4 * mib, reps=5,
                        time_us=us, GBps=None))  # fmt: skip
    c, why = cal.fit(pts, gpus_per_node=2, nranks=4)
    s = next(q["bytes"] for q in pts if q["kind"] == "stream" and q["tier"] == "scaleout")
    assert c["fabric_flows_GBps"] == [
        [1, pytest.approx(0.02, rel=1e-3), s], [2, pytest.approx(0.015, rel=1e-3), s],
        [1, pytest.approx(0.022, rel=1e-3), 4 * mib], [2, pytest.approx(0.018, rel=1e-3), 4 * mib],
    ]  # fmt: skip
    assert c["fabric_GBps"] == pytest.approx(0.02, rel=1e-3)  # the --bytes point's
    assert "one curve per size" in why["fabric_flows_GBps"]
    fabric(gpus_per_node=2, fabric_GBps=0.02).with_(fabric_flows=c["fabric_flows_GBps"])
    assert cal.fabric_sizes(mib, [4 * mib]) == [mib, 4 * mib]
    assert cal.fabric_sizes(mib, [mib >> 2, 4 * mib, mib >> 2]) == [mib, mib >> 2, 4 * mib]
    assert cal.fabric_sizes(mib, [mib]) == cal.fabric_sizes(mib, [0]) == [mib]


def with_median(pts, rank_median):
    """``pts`` with the median rank's time on their ``allnics``/``flows`` points: the
    slowest's data time over ``rank_median[k]`` (k flows; 1 for allnics)."""
    lat = next(q for q in pts if q["kind"] == "pingpong-all" and q["tier"] == "scaleout")
    out = []
    for q in pts:
        if q["kind"] in ("allnics", "flows"):
            k = 1 if q["kind"] == "allnics" else q["peers"]
            slow = q["time_us"] - lat["time_us"]
            q = {**q, "median_rank_us": lat["time_us"] + slow / rank_median[k]}
        out.append(q)
    return out


def test_the_tail_is_the_slowest_over_the_median_per_doubling_of_the_nics():
    """The cap is fitted from the median rank (the NICs' throughput), the tail from the
    slowest over it: on 4 NICs a slowest 1.21x the median is 1.1x per doubling; a step of
    all NICs then ends where the slowest did, as with the slowest's cap alone."""
    pts = points(cap=0.03, flows={2: 0.02})
    c_old, _ = cal.fit(pts, gpus_per_node=2, nranks=4)
    assert "fabric_tail" not in c_old  # points without the median rank: the cap as before
    c, why = cal.fit(with_median(pts, {1: 1.21, 2: 1.44}), gpus_per_node=2, nranks=4)
    assert c["fabric_tail"] == [
        [1, pytest.approx(1.1, rel=1e-4)],
        [2, pytest.approx(1.2, rel=1e-4)],
    ]
    assert c["fabric_flows_GBps"][0][1] == pytest.approx(0.03 * 1.21, rel=1e-3)
    assert "median rank" in why["fabric_GBps"] and "per doubling" in why["fabric_tail"]
    old = fabric_of(c_old)
    new = fabric_of(c)
    assert new.stretch(4, 1) == pytest.approx(1.21, rel=1e-3)
    assert new.stretch(1, 1) == 1.0 and old.stretch(4, 1) == 1.0
    assert new.stretch(2, 1.5) == pytest.approx(1.1 + 0.1 * math.log2(1.5))  # log axis of flows
    mib = 1 << 20
    rail = np.array([2, 3, 0, 1])
    for src, nb in (
        (np.arange(4), np.full(4, mib)),
        (np.repeat(np.arange(4), 2), np.full(8, mib / 2)),
    ):
        dst = rail[src] if nb.size == 4 else np.array([2, 3, 3, 2, 0, 1, 1, 0])
        assert fab.step_finish(new, np.zeros(4), src, dst, nb).max() == pytest.approx(
            fab.step_finish(old, np.zeros(4), src, dst, nb).max(), rel=2e-3
        )
    # two of the four NICs: the tail of two, where the slowest's cap gave none
    two = fab.step_finish(new, np.zeros(4), np.array([0, 1]), np.array([2, 3]), np.full(2, mib))
    alone = fab.step_finish(old, np.zeros(4), np.array([0, 1]), np.array([2, 3]), np.full(2, mib))
    lat = new.nic_us + new.stage_us
    assert two.max() - lat == pytest.approx((alone.max() - lat) * 1.1, rel=1e-3)
    # the all-reduce models read it too: 4 NICs at once, 1.21x
    ring_new = ar_model.ring(mib, 2, new).time_us
    assert ring_new > ar_model.ring(mib, 2, new.with_(fabric_tail=())).time_us


def test_a_message_within_the_eager_limit_has_no_tail():
    """calibrate's tail is of messages that wait for their receivers (1 and 4 MiB); a
    host-driven step's message within the eager limit is not stretched by it (on the
    emulated 8x1, Rabenseifner's 8-32 KiB steps ran at the untailed rate)."""
    tailed = fabric().with_(fabric_tail=((1, 1.1),), nic_eager_bytes=32768.0)
    eight = tailed.stretch(8, 1)
    assert eight == pytest.approx(1.1**3)
    nic = float(tailed.nic_time_us(65536))
    assert float(tailed.wire_time_us(65536, 8, message_bytes=65536)) == pytest.approx(nic * eight)
    assert float(tailed.wire_time_us(16384, 8, message_bytes=32768)) == pytest.approx(nic / 4)
    assert float(tailed.wire_time_us(65536, 8)) == pytest.approx(nic * eight)  # no message
    # without a measured eager limit (every shipped profile) every message is stretched
    assert float(tailed.with_(nic_eager_bytes=0.0).wire_time_us(8, 8, message_bytes=8)) == (
        pytest.approx(float(tailed.nic_time_us(8)) * eight)
    )
    # a one-sided put (NVRAR's cpu steps) has no eager limit: it keeps the tail
    cross = np.array([True])
    put = float(ar_model._link(tailed, cross, 16384, 0.0, concurrent=8, two_sided=False)[0])
    send = float(ar_model._link(tailed, cross, 16384, 0.0, concurrent=8)[0])
    assert put - tailed.nic_us == pytest.approx((send - tailed.nic_us) * eight)
    # Rabenseifner's 32/16/8 KiB steps at 64 KiB: untailed; at 1 MiB its 512 KiB step is
    untailed = tailed.with_(fabric_tail=())
    small, big = 65536, 1 << 20
    assert ar_model.rabenseifner(small, 8, tailed).time_us == pytest.approx(
        ar_model.rabenseifner(small, 8, untailed).time_us
    )
    assert ar_model.rabenseifner(big, 8, tailed).time_us > 1.1 * (
        ar_model.rabenseifner(big, 8, untailed).time_us
    )


def fabric_of(constants: dict) -> Fabric:
    table = FabricTable(scaleup="s", scaleout="n", **{
        k: v for k, v in constants.items() if k != "incast"})  # fmt: skip
    return table.per_gpu(2)


def late_rounds(pts: list[dict], late: dict[int, int], rto: float, ranks: int = 4) -> list[dict]:
    """``pts`` with each ``flows`` point's rank rounds (``ranks`` x 10): on time at the
    point's time, ``late[k]`` of them a timeout ``rto`` later."""
    out = []
    for q in pts:
        if q["kind"] == "flows":
            times = np.full(ranks * 10, q["time_us"]) + np.linspace(-500.0, 500.0, ranks * 10)
            times[: late.get(q["peers"], 0)] += rto
            q = {**q, "rank_rounds_us": times.reshape(ranks, 10).tolist()}
        out.append(q)
    return out


def test_a_lossy_fit_measures_the_timeout_and_each_ports_chance_of_one():
    rto = 200_000.0
    pts = late_rounds(points(cap=0.02, flows={2: 0.015}), {2: 10}, rto)
    lossless, _ = cal.fit(pts, gpus_per_node=2, nranks=4)
    assert "loss_timeout_us" not in lossless and len(lossless["fabric_flows_GBps"]) == 2
    c, why = cal.fit(pts, gpus_per_node=2, nranks=4, flow_control="lossy")
    assert c["loss_timeout_us"] == pytest.approx(rto, rel=0.01)
    [(k, chance, nbytes)] = c["loss_late"]
    assert (k, nbytes) == (2, 1 << 20)
    # 10 of 40 rank rounds late: a quarter of the ranks, each sending into 2 such ports
    assert 1 - (1 - chance) * (1 - chance / 2) ** 2 == pytest.approx(0.25, abs=1e-4)
    assert "rank rounds" in why["loss_timeout_us"] and "senders" in why["loss_late"]
    assert "fabric_flows_GBps" not in c  # the k = 2 point lost packets: k = 1 alone
    assert c["fabric_GBps"] == pytest.approx(0.02, rel=1e-3)
    # a round late by a connection's SYN sent again (31 s) is neither a timeout nor late
    syn = [{**q, "rank_rounds_us": [[q["rank_rounds_us"][0][0] + 31e6] + q["rank_rounds_us"][0][1:],
                                    *q["rank_rounds_us"][1:]]} if q["kind"] == "flows" else q
           for q in pts]  # fmt: skip
    c_syn, _ = cal.fit(syn, gpus_per_node=2, nranks=4, flow_control="lossy")
    assert c_syn["loss_timeout_us"] == pytest.approx(rto, rel=0.01)
    [(_, chance_syn, _)] = c_syn["loss_late"]
    assert 0 < chance_syn < chance  # 9 late of the 39 rounds kept
    # no round standing apart: no timeout
    quiet, _ = cal.fit(late_rounds(points(cap=0.02, flows={2: 0.015}), {}, rto),
                       gpus_per_node=2, nranks=4, flow_control="lossy")  # fmt: skip
    assert "loss_timeout_us" not in quiet and "loss_late" not in quiet
    # the profile keeps them for the lossy case only
    table = FabricTable(scaleup="s", scaleout="n", **{k: v for k, v in c.items() if k != "incast"},
                        incast_lossy=c["incast"], incast_lossless=0.0)  # fmt: skip
    lossy = table.per_gpu(2, flow_control="lossy")
    assert lossy.loss_timeout_us == pytest.approx(c["loss_timeout_us"])
    assert lossy.loss_late == ((2.0, chance, float(1 << 20)),)
    plain = table.per_gpu(2, flow_control="lossless")
    assert plain.loss_timeout_us == 0.0 and plain.loss_late == ()
    # simulate's override: 0 gives the loss back to the incast multiplier
    assert table.per_gpu(2, flow_control="lossy", loss_timeout_us=0.0).loss_timeout_us == 0.0
    from commbench.model.simulate import OVERRIDES

    assert OVERRIDES["loss_timeout_us"] == "loss_timeout_us"
    assert OVERRIDES["calls_averaged"] == "calls_averaged"


def test_simulate_shows_a_lossy_profiles_timeouts_as_a_run_of_n_calls_reports_them(tmp_path):
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile

    base = load_toml(load_profile("local-cluster").path)
    pts = late_rounds(points(cap=0.02, flows={2: 0.015}), {2: 10}, 200_000.0)
    c, why = cal.fit(pts, gpus_per_node=2, nranks=4, flow_control="lossy")
    path = tmp_path / "lossy.toml"
    path.write_text(cal.dump_toml(cal.profile_data(base, "lossy", c, why, RUN, 2, "lossy")))
    times = {}
    for calls in (1, 5, 50):
        out = tmp_path / f"calls{calls}.jsonl"
        assert main(["simulate", "alltoallv", "--system", str(path), "--servers", "2",
                     "--size", "1M", "--workload", "uniform", "--impls", "fanout,fast",
                     "--no-tune", "--calls", str(calls), "--out", str(out)]) == 0  # fmt: skip
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            times[rec["impl"], calls] = rec["time_us"]
    # a fan-out's ports take two senders: the more calls a mean holds, the nearer it
    # comes to the likeliest rank's chance; FAST's stages have one sender a port
    assert times["fanout", 1] > times["fanout", 5] > times["fanout", 50]
    assert times["fast", 1] == times["fast", 5] == times["fast", 50]
    assert main(["simulate", "alltoallv", "--system", str(path), "--servers", "2", "--size",
                 "1M", "--calls", "0"]) == 2  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1e3), min_size=4, max_size=40), st.integers(0, 10))
def test_late_rounds_split_where_the_variance_within_is_least(on_time, late):
    times = np.array(on_time + [1e6 + 10.0 * i for i in range(late)])
    x = np.sort(times)
    brute = min(range(2, x.size),
                key=lambda i: x[:i].var() * i + x[i:].var() * (x.size - i))  # fmt: skip
    split = cal.split_late(times)
    if late:  # the late ones stand apart, whatever the on-time ones (one alone too)
        threshold, by = split
        assert (times > threshold).sum() == late and by == pytest.approx(
            np.median(x[-late:]) - np.median(x[:-late])
        )
    if split is not None and x[brute - 1] < x[brute]:
        assert (x > split[0]).sum() == x.size - brute


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(1, 16))
def test_a_ports_chance_is_the_inverse_of_the_ranks_late_share(chance, k):
    def late_of(p: float) -> float:
        return 1 - (1 - p) * (1 - p / k) ** k

    late = late_of(chance)
    found = cal.port_loss(late, k)
    # near chance 1 the late share is flat (k = 1: 1 - (1 - p)^2), so the chance is
    # found to the late share's precision, not to 1e-9
    assert late_of(found) == pytest.approx(late, abs=1e-12)
    assert found == pytest.approx(chance, abs=1e-6)


def test_a_rank_is_late_where_its_port_or_a_port_it_sends_to_pays_a_timeout():
    p = 8
    f = fabric(gpus_per_node=1, scaleup_GBps=math.inf).with_(
        loss_timeout_us=200_000.0, loss_late=((2, 0.1, 1 << 20), (4, 0.3, 1 << 20)))  # fmt: skip
    # every rank sends 1 MiB to 4 others (the flows pattern at k = 4): 1 - (1 - p)(1 - p/4)^4
    src = np.repeat(np.arange(p), 4)
    dst = (src + np.tile(np.arange(1, 5), p)) % p
    chance = fab.late_chance(f, src, dst, np.full(src.size, 1 << 18), p)
    assert chance == pytest.approx(np.full(p, 1 - 0.7 * 0.925**4))
    # between the measured counts, on a log axis of senders; beyond them flat
    three = fab.late_chance(f, np.array([1, 2, 3]), np.zeros(3, int), np.full(3, 1 << 18), 4)
    assert three[0] == pytest.approx(0.1 + 0.2 * math.log(1.5) / math.log(2))
    # one sender a port loses nothing
    shift = fab.late_chance(f, np.arange(p), (np.arange(p) + 1) % p, np.full(p, 1 << 20), p)
    assert not shift.any()
    # a fabric without loss_late: every port taking two senders pays
    every = fab.late_chance(f.with_(loss_late=()), np.array([1, 2]), np.zeros(2, int),
                            np.full(2, 1e6), 3)  # fmt: skip
    assert every == pytest.approx([1.0, 0.5, 0.5])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8), st.integers(1, 12))
def test_the_late_share_lies_between_the_likeliest_rank_and_any_rank(chances, calls):
    share = fab.late_share(chances, calls)
    q = np.array(chances)
    assert q.max() - 1e-9 <= share <= 1 - np.prod(1 - q) + 1e-9
    if calls == 1:
        assert share == pytest.approx(1 - np.prod(1 - q))


def test_the_late_share_is_the_mean_largest_share_the_ranks_draw():
    rng = np.random.default_rng(3)
    q, calls = np.array([0.15] * 8), 5
    draws = rng.random((20_000, 8, calls)) < q[None, :, None]
    assert fab.late_share(q, calls) == pytest.approx(draws.sum(axis=2).max(axis=1).mean() / calls,
                                                     abs=0.01)  # fmt: skip
    assert fab.late_share([0.0, 0.0], 5) == 0.0


def test_loss_on_a_lossy_fabric_costs_timeouts_by_the_late_share():
    p = 8
    uniform = np.full((p, p), 1 << 20)
    np.fill_diagonal(uniform, 0)
    f = fabric(gpus_per_node=1, scaleup_GBps=math.inf, incast=1.5)
    lossy = f.with_(loss_timeout_us=200_000.0, loss_late=((7, 0.1, 7 << 20),), calls_averaged=5)
    plain = a2a_model.fanout(uniform, f.with_(incast=0.0)).time_us
    src, dst = np.nonzero(uniform)
    share = fab.late_share(fab.late_chance(lossy, src, dst, uniform[src, dst], p), 5)
    assert 0.1 < share < 1
    assert a2a_model.fanout(uniform, lossy).time_us == pytest.approx(plain + 200_000.0 * share)
    assert a2a_model.fanout(uniform, f).time_us > plain + 200_000.0  # the byte multiplier
    # one flow a NIC a step (a FAST stage, a spread-out step): no timeout
    shift = np.roll(np.eye(p, dtype=np.int64), 1, axis=1) * (1 << 20)
    assert a2a_model.spreadout(shift, lossy).time_us == pytest.approx(
        a2a_model.spreadout(shift, f).time_us
    )
    with pytest.raises(ValueError, match="calls_averaged"):
        lossy.with_(calls_averaged=0)
    with pytest.raises(ValueError, match="loss_late"):
        lossy.with_(loss_late=((2, 1.5, 1 << 20),))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1)), min_size=1, max_size=9),
    st.floats(1, 3e5),
    st.integers(1, 12),
)
def test_the_expected_slowest_lies_between_the_slowest_base_and_every_rank_late(
    ranks, late_us, calls
):
    """``E[max_r (base_r + late * S_r)]``: never below the slowest base, nor below any
    rank's own expectation, nor above the slowest base plus ``late`` times the expected
    largest share (:func:`late_share`), which it is where the bases are equal."""
    base = np.array([b for b, _ in ranks])
    chance = np.array([c for _, c in ranks])
    got = fab.expected_slowest(base, chance, late_us, calls)
    top = base.max() + late_us * fab.late_share(chance, calls)
    assert base.max() - 1e-6 <= got <= top * (1 + 1e-9) + 1e-6
    assert got >= (base + late_us * chance).max() * (1 - 1e-9) - 1e-6
    same = fab.expected_slowest(np.full(base.size, 7.0), chance, late_us, calls)
    assert same == pytest.approx(7.0 + late_us * fab.late_share(chance, calls), rel=1e-9)


def test_the_expected_slowest_is_the_mean_of_drawn_calls():
    rng = np.random.default_rng(11)
    base = np.array([400.0, 150, 150, 150, 150, 150, 150, 150])
    chance = np.full(8, 0.3)
    late = rng.random((100_000, 8, 5)) < chance[:, None]
    drawn = (base + 157 * late.mean(axis=2)).max(axis=1)
    assert fab.expected_slowest(base, chance, 157, 5) == pytest.approx(drawn.mean(), rel=2e-3)


def test_a_light_rank_s_timeout_hides_behind_a_heavy_receiver():
    """Skew on a lossy fabric: every rank sends a little to each other, and ranks 0 and
    1 much to each other, so they take longest anyway; a timeout on a light rank's flow
    ends before them and adds only where it outlasts them. The call pays the expected
    slowest rank, less than their time plus the late share of every rank (the charge
    before 2026-12-05)."""
    p = 8
    skew = np.full((p, p), 1 << 18)
    skew[0, 1] = skew[1, 0] = 16 << 20
    np.fill_diagonal(skew, 0)
    f = fabric(gpus_per_node=1, scaleup_GBps=math.inf, incast=0.0)
    lossy = f.with_(loss_timeout_us=200_000.0, loss_late=((7, 0.2, 7 << 20),), calls_averaged=5)
    src, dst = np.nonzero(skew)
    chance = fab.late_chance(lossy, src, dst, skew[src, dst], p)
    plain = a2a_model.fanout(skew, f).time_us
    got = a2a_model.fanout(skew, lossy).time_us
    assert plain < got < plain + 200_000.0 * fab.late_share(chance, 5)


def test_a_nic_left_sending_alone_runs_at_its_own_rate():
    """Under a tail the rates of m NICs at once are ``stretch(m)`` slower; a NIC whose
    peers are done runs on at its own rate."""
    rate = 10.0
    nb = np.array([1000.0, 3000.0])
    ends = fab.shared_cap_us(nb, nb / rate, math.inf, lambda m: 1.25 if m == 2 else 1.0)
    assert ends[0] == pytest.approx(125.0)  # 1000 B at 8 B/us
    assert ends[1] == pytest.approx(125.0 + 2000.0 / rate)
    with pytest.raises(ValueError, match="stretch >= 1"):
        fabric().with_(fabric_tail=((1, 0.9),))


def test_refit_fits_a_profile_again_from_its_raw_points(tmp_path):
    pts = [{"run": RUN, **q} for q in with_median(points(cap=0.03), {1: 1.21})]
    c, why = cal.fit(points(cap=0.03), gpus_per_node=2, nranks=4)  # as an older version wrote
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile

    base = load_toml(load_profile("local-cluster").path)
    data = cal.profile_data(base, "old", c, why, RUN, 2, "lossless")
    old = tmp_path / "old.toml"
    old.write_text(cal.dump_toml(data))
    cal.points_path(old).write_text("".join(json.dumps(q) + "\n" for q in pts))
    new = tmp_path / "refit" / "new.toml"
    new.parent.mkdir()
    constants = cal.refit_profile(old, new)
    prof = parse_profile(tomllib.loads(new.read_text()), new)
    assert prof.fabric.fabric_tail == [[1, pytest.approx(1.1, rel=1e-3)]]
    assert constants["fabric_tail"] == prof.fabric.fabric_tail
    assert prof.fabric.sources["fabric_tail"].startswith(f"measured: {RUN}:")
    assert cal.points_path(new).read_text() == cal.points_path(old).read_text()
    mixed = pts + [{**pts[0], "run": "another"}]
    cal.points_path(old).write_text("".join(json.dumps(q) + "\n" for q in mixed))
    with pytest.raises(cal.UsageError, match="from 2 runs"):
        cal.refit_profile(old, new)


def test_mpi_models_follow_open_mpi_tuned_choices():
    assert a2a_model.ompi_alltoallv_algorithm(8) == "basic_linear"
    assert a2a_model.ompi_alltoallv_algorithm(2) == "pairwise"
    assert a2a_model.ompi_alltoallv_algorithm(64) == "pairwise"
    traffic = np.arange(64).reshape(8, 8) * 1000
    f = fabric()
    assert a2a_model.mpi(traffic, f).time_us == a2a_model.fanout(traffic, f).time_us
    small = traffic[:2, :2]
    assert a2a_model.mpi(small, f).time_us == a2a_model.spreadout(small, f).time_us
    assert ar_model.ompi_allreduce_algorithm(8, 256) == "recursive-doubling"
    assert ar_model.ompi_allreduce_algorithm(8, 1 << 20) == "rabenseifner"
    assert ar_model.ompi_allreduce_algorithm(2, 100_000) == "ring"
    assert ar_model.ompi_allreduce_algorithm(4096, 1 << 20) == "rabenseifner"
    one = f.with_(gpus_per_node=1)  # one rank per node: HAN hands over to tuned
    pred = ar_model.predict("mpi", 1 << 20, 4, one)
    assert pred.info["algo"] == "rabenseifner"
    assert pred.time_us == ar_model.rabenseifner(1 << 20, 4, one, nearest_first=True).time_us


def test_mpi_allreduce_with_several_ranks_per_node_is_han():
    assert ar_model.han_applies(4, 2) and ar_model.han_applies(2, 4)
    assert not ar_model.han_applies(8, 1)  # one rank per node: tuned
    assert not ar_model.han_applies(1, 8)  # one node: HAN disqualifies itself
    f = fabric()  # 2 ranks per node
    pred = ar_model.predict("mpi", 1 << 20, 4, f)
    assert pred.info["algo"] == "han(reduce-scatter+gather, linear bcast)"
    assert pred.info["han_segments"] == 16
    assert pred.time_us == ar_model.han(1 << 20, 4, f).time_us
    # libnbc's choices among the leaders (nbc_ireduce.c, nbc_ibcast.c)
    assert ar_model._inter_reduce(65536, 4, f)[0] == "reduce-scatter+gather"
    assert ar_model._inter_reduce(65536, 2, f)[0] == "chain"
    assert ar_model._inter_reduce(1024, 2, f)[0] == "binomial"
    assert ar_model._inter_bcast(65536, 4, f)[0] == "linear"
    assert ar_model._inter_bcast(1024, 8, f)[0] == "binomial"
    assert ar_model._inter_bcast(65536, 8, f)[0] == "chain"
    # one segment: the four sub-collectives one after the other; the root of the
    # reduce-scatter + gather exchanges its halves (each step the longer direction) and
    # receives the gather; `received` is that path, `sent` its NIC's share of it
    n = 4096
    _, serial, sent, received, _, _ = ar_model._inter_reduce(n, 4, f)
    assert received > sent > 0
    _, lat, copies, nothing, _ = ar_model._inter_bcast(n, 4, f)  # linear: root sends
    assert copies > 0 and nothing == 0
    parts = (ar_model._intra_tree(n, f, reduce=True), serial + received, lat + copies,
             ar_model._intra_tree(n, f, reduce=False))  # fmt: skip
    assert ar_model.han(n, 4, f).time_us == pytest.approx(f.stage_us + sum(parts))
    # token buckets: a broadcast from a full bucket, its three copies back to back,
    # refilling only while each is posted
    depth = 2.5 * n
    bucket = f.with_(nic_burst_bytes=depth)
    _, _, copies, _, left = ar_model._inter_bcast(n, 4, bucket, depth)
    refill = 2 * bucket.msg_us * bucket.nic_GBps * 1e3
    assert copies == pytest.approx(bucket.nic_time_us(3 * n - depth - refill)) and left == 0
    _, _, busy, _, _ = ar_model._inter_bcast(n, 4, bucket)  # from an empty bucket
    assert busy > copies
    # the reduce pays two sets: the root's NIC what it sends, the buckets on its way in
    # (its switch port, the senders' NICs) what it receives; 1.5 n come in, 0.75 n go out
    _, _, sent, received, left, inbound = ar_model._inter_reduce(n, 4, bucket, depth, depth)
    assert sent == received == 0 and depth - 1.5 * n < inbound < depth  # refilled between
    assert left == depth  # refilled while the gather came in
    _, _, _, empty, left, _ = ar_model._inter_reduce(n, 4, bucket, 0.0, 0.0)
    _, _, sent, received, _, _ = ar_model._inter_reduce(n, 4, bucket, 0.0, depth)
    assert 0 < received < empty and sent == received  # the halves out set the pace
    assert 0 < left < depth  # the root's NIC rests through the gather
    # the timed loop: a call finds the buckets as the previous call left them, the
    # root's NIC drained by its broadcast, the inbound ones rested through it; so it is
    # slower than a rested call and faster than one from empty buckets
    n, depth = 16384, 12288.0
    bucket = f.with_(nic_burst_bytes=depth)

    def one_call(root: float, inbound: float) -> float:
        _, serial, sent, received, left, _ = ar_model._inter_reduce(n, 4, bucket, root, inbound)
        _, lat, copies, _, _ = ar_model._inter_bcast(n, 4, bucket, left)
        return bucket.stage_us + sum((ar_model._intra_tree(n, bucket, reduce=True),
                                      serial + max(sent, received), lat + copies,
                                      ar_model._intra_tree(n, bucket, reduce=False)))  # fmt: skip

    looped = ar_model.han(n, 4, bucket).time_us
    assert one_call(depth, depth) < looped < one_call(0.0, 0.0)
    rested = ar_model.han(n, 4, bucket, after_rest=True).time_us
    assert rested == pytest.approx(one_call(depth, depth))  # the call after a rest
    assert ar_model.mpi(n, 4, bucket, after_rest=True).time_us == rested
    # many segments: the pipeline costs about one iteration per segment, the inter-node
    # side being the longer here: the reduce's and the broadcast's sends add up on the
    # leader's NIC against the reduce's receives
    seg = ar_model.HAN_SEGMENT_BYTES
    _, serial, sent, received, _, _ = ar_model._inter_reduce(seg, 4, f)
    _, lat, copies, _, _ = ar_model._inter_bcast(seg, 4, f)
    per_seg = max(serial, lat) + max(sent + copies, received)
    t64, t128 = (ar_model.han(k * seg, 4, f).time_us for k in (64, 128))
    assert t128 - t64 == pytest.approx(64 * per_seg, rel=0.05)


def test_ranks_that_share_cores_pay_the_latency_of_those_that_exchange():
    f = fabric()  # 2 ranks per node; nic_us is every rank's latency at once
    assert f.nic_us_among(4, 8) == f.nic_us  # no quiet pair measured: one latency
    quiet = f.with_(nic_quiet_us=f.nic_us / 4)
    assert quiet.nic_us_among(8, 8) == f.nic_us
    assert quiet.nic_us_among(4, 8) == pytest.approx(f.nic_us / 2)  # half of them: half
    assert quiet.nic_us_among(1, 8) == pytest.approx(f.nic_us / 4)  # never below a pair
    assert f.with_(nic_quiet_us=2 * f.nic_us).nic_us_among(2, 8) == f.nic_us  # nor above all
    # HAN's inter-node reduce and broadcast run among the node leaders alone (4 of 8
    # ranks): at 256 B, a call of latencies, they pay half the latency; the node's
    # reduce and broadcast, every rank at once, do not change
    n = 256
    _, serial, sent, received, _, _ = ar_model._inter_reduce(n, 4, f.with_(nic_us=f.nic_us / 2))
    _, lat, copies, _, _ = ar_model._inter_bcast(n, 4, f.with_(nic_us=f.nic_us / 2))
    expected = f.stage_us + sum((ar_model._intra_tree(n, f, reduce=True),
                                 serial + max(sent, received), lat + copies,
                                 ar_model._intra_tree(n, f, reduce=False)))  # fmt: skip
    assert ar_model.han(n, 4, quiet).time_us == pytest.approx(expected)
    assert ar_model.han(n, 4, quiet).time_us < ar_model.han(n, 4, f).time_us
    assert ar_model.han(n, 4, quiet).info["han_inter_latency_us"] == pytest.approx(f.nic_us / 2)


# ---------------------------------------------------------------- the job experiment


def test_calibrate_experiment_renders_a_calibrate_step_on_every_system():
    from tests.test_jobs import render

    job = render("perlmutter", 2, experiment="calibrate")
    line = next(ln for ln in job.script.splitlines() if ln.startswith("run_step "))
    words = line.split()
    assert words[3:6] == ["-m", "commbench", "calibrate"]
    out = words[words.index("--out") + 1]
    assert out.endswith("/calibrated-perlmutter.toml") and str(job.run_dir) in out
    assert words[words.index("--base") + 1] == "perlmutter"
    emulated = render("local", 1, experiment="calibrate").script
    assert "--gpus-per-node 2" in emulated  # the emulated grouping, as for `run`


def test_a_calibrate_step_takes_no_collective():
    from commbench.errors import UsageError
    from commbench.jobs.experiments import parse_step

    assert parse_step({"command": "calibrate"}, "here").command == "calibrate"
    with pytest.raises(UsageError, match="takes no collective"):
        parse_step({"command": "calibrate", "collective": "allreduce"}, "here")
    with pytest.raises(UsageError, match="collective must be one of"):
        parse_step({"impls": {"cpu": ["mpi"]}}, "here")


def test_butterfly_steps_pay_the_calibrated_step_and_the_call_its_lateness_once():
    """With ``butterfly_step_us`` each step between nodes costs it in place of an empty
    round (posts, stage, latency), and the call starts ``butterfly_call_us`` late, once:
    Rabenseifner's six steps on 8 single-rank nodes gain 6 x the step difference,
    recursive doubling's three 3 x; ring and NVRAR (one-sided puts) do not move."""
    f = fabric_from_profile("local-cluster").with_(gpus_per_node=1)
    assert f.butterfly_step_us is None  # shipped profile: not measured
    round_us = f.stage_us + 2 * f.msg_us + f.nic_us
    g = f.with_(butterfly_step_us=40.0, butterfly_call_us=70.0)
    for model, steps in ((ar_model.rabenseifner, 6), (ar_model.recursive_doubling, 3)):
        base, fit = model(256, 8, f).time_us, model(256, 8, g).time_us
        assert fit - base == pytest.approx(70.0 + steps * (40.0 - round_us))
    for model in (ar_model.ring, ar_model.nvrar):
        assert model(256, 8, g).time_us == model(256, 8, f).time_us
    # inside a node a step keeps its own cost: 4 x 2, Rabenseifner's two bit-0 steps
    two = fabric_from_profile("local-cluster")
    moved = ar_model.rabenseifner(256, 4, two.with_(butterfly_step_us=40.0)).time_us
    base = ar_model.rabenseifner(256, 4, two).time_us
    two_round = two.stage_us + 2 * two.msg_us + two.nic_us
    assert moved - base == pytest.approx(4 * (40.0 - two_round))


def test_ring_steps_pay_the_calibrated_step_and_the_call_its_lateness_once():
    """With ``ring_step_us`` each of the ring's 2(P - 1) steps costs it in place of an
    empty round's posts and the link's latency, on either tier, and the call starts
    ``ring_call_us`` late, once; the bytes still cost their wire time."""
    for nodes, g in ((8, 1), (4, 2)):
        f = fabric_from_profile("local-cluster").with_(gpus_per_node=g)
        assert f.ring_step_us is None  # shipped profile: not measured
        fit = f.with_(ring_step_us=40.0, ring_call_us=70.0)
        steps = 2 * (nodes * g - 1)
        small = ar_model.ring(256, nodes, fit).time_us
        slower = ar_model.ring(256, nodes, fit.with_(ring_step_us=80.0)).time_us
        assert slower - small == pytest.approx(steps * 40.0)
        later = ar_model.ring(256, nodes, fit.with_(ring_call_us=0.0)).time_us
        assert small - later == pytest.approx(70.0)
        assert small < ar_model.ring(256, nodes, f).time_us  # an empty round and a latency
        big, base = ar_model.ring(4 << 20, nodes, fit), ar_model.ring(4 << 20, nodes, f)
        assert abs(big.time_us - base.time_us) < 0.02 * base.time_us  # the bytes' time holds
        # butterflies keep their own step
        assert ar_model.recursive_doubling(256, nodes, fit).time_us == (
            ar_model.recursive_doubling(256, nodes, f).time_us
        )
    # a measured step is the step everywhere: where the default's fixed cost (an empty
    # round and a latency) is the same number the two agree, the NIC's token bucket
    # refilling over it too (8 single-rank nodes: every link crosses)
    f = fabric_from_profile("local-cluster").with_(gpus_per_node=1, nic_burst_bytes=12000.0)
    step = 150.0
    measured = f.with_(ring_step_us=step)
    default = f.with_(stage_us=step - f.nic_us - 2 * f.msg_us)
    for n in (256, 16384, 65536, 1 << 20):
        assert ar_model.ring(n, 8, measured).time_us == pytest.approx(
            ar_model.ring(n, 8, default).time_us
        )


def test_nvrar_inter_node_steps_pay_the_measured_put():
    f = fabric_from_profile("local-cluster")
    assert f.put_us == 0  # shipped profile: not measured
    base = ar_model.nvrar(4096, 4, f)
    slow = ar_model.nvrar(4096, 4, f.with_(put_us=500.0))
    steps = base.info["inter_steps"]
    assert slow.time_us - base.time_us == pytest.approx(500.0 * steps)
    # one rank per node: every step is a put
    one = f.with_(gpus_per_node=1)
    assert ar_model.nvrar(4096, 8, one.with_(put_us=100.0)).time_us == pytest.approx(
        ar_model.nvrar(4096, 8, one).time_us + 3 * 100.0
    )


def test_nvrar_cells_carry_half_the_wire_on_the_cpu_backend():
    assert fabric_from_profile("local-cluster").ll8_share == 0.5  # MPI puts of LL8 cells
    assert fabric_from_profile("perlmutter").ll8_share == 0.25  # NCCL's LL efficiency
    f = fabric_from_profile("local-cluster")
    slow = ar_model.nvrar(1 << 20, 4, f.with_(ll8_share=0.25)).time_us
    assert ar_model.nvrar(1 << 20, 4, f).time_us < slow
    with pytest.raises(ValueError, match="ll8_share"):
        f.with_(ll8_share=0)


def test_a_nic_is_overfilled_where_it_is_full_and_two_senders_have_rate_to_spare():
    f = fabric(gpus_per_node=1, scaleup_GBps=math.inf)
    rate = f.nic_GBps * 1e3  # bytes per us
    mib = float(1 << 20)
    # three senders with nothing else to send into one NIC: overfilled for all 3 MiB
    k, taken = fab.overfilled_ports(f, [1, 2, 3], [0, 0, 0], [mib] * 3, 4)
    assert k.tolist() == [3, 0, 0, 0] and taken[0] == pytest.approx(3 * mib)
    # a permutation and a uniform all-to-all fill every NIC at once: none
    assert not fab.overfilled_ports(f, [0, 1, 2, 3], [1, 2, 3, 0], [mib] * 4, 4)[0].any()
    src, dst = np.nonzero(1 - np.eye(4, dtype=int))
    assert not fab.overfilled_ports(f, src, dst, np.full(src.size, mib), 4)[0].any()
    # a hot receiver: every rank sends 1 MiB to each other, 1.5 MiB to rank 0; once the
    # rest are through its three senders converge on it with 1.5 MiB left in all
    nb = np.where(dst == 0, 1.5 * mib, mib)
    k, taken = fab.overfilled_ports(f, src, dst, nb, 4)
    assert k.tolist() == [3, 0, 0, 0] and taken[0] == pytest.approx(1.5 * mib)
    # its chance: the larger of the two; its cover: what its other two flows keep it busy
    lossy = f.with_(loss_timeout_us=200_000.0, loss_late=((3, 0.1, 1 << 20),),
                    loss_overfill=((2, 0.3, 1 << 20), (3, 0.6, 1 << 20)))  # fmt: skip
    chance, senders, cover = fab.port_stalls(lossy, src, dst, nb, 4)
    assert chance.tolist() == pytest.approx([0.6, 0.1, 0.1, 0.1]) and senders.tolist() == [3] * 4
    assert cover.tolist() == pytest.approx([1.5 * mib * 2 / 3 / rate, 0, 0, 0])
    assert lossy.overfill_chance(2.5, 1 << 20) == pytest.approx(0.45, abs=0.02)
    assert f.overfill_chance(3, 1 << 20) == 0.0
    with pytest.raises(ValueError, match="loss_overfill"):
        lossy.with_(loss_overfill=((2, 1.5, 1 << 20),))


def test_an_overfilled_nic_costs_its_chance_and_a_timeout_less_what_it_covers():
    p = 8
    uniform = np.full((p, p), 1 << 20)
    np.fill_diagonal(uniform, 0)
    skewed = uniform.copy()
    skewed[:, 0] = 5 << 18  # 1.75 MiB overfilled, 140 ms at the NIC's rate
    skewed[0, 0] = 0
    f = fabric(gpus_per_node=1, scaleup_GBps=math.inf)
    lossy = f.with_(loss_timeout_us=200_000.0, loss_late=((7, 0.05, 7 << 20),), calls_averaged=5)
    over = lossy.with_(loss_overfill=((7, 0.9, 1 << 20),))
    # uniform: nothing overfilled, nothing changes
    assert a2a_model.fanout(uniform, over).time_us == a2a_model.fanout(uniform, lossy).time_us
    plain = a2a_model.fanout(skewed, lossy).time_us
    charged = a2a_model.fanout(skewed, over).time_us
    assert charged > plain
    # a timeout its other flows cover (120 ms of 140) costs less than a whole one
    stalls = fab.port_stalls(over, *np.nonzero(skewed), skewed[skewed > 0], p)
    flows = (*np.nonzero(skewed), np.zeros(56), np.zeros(p))
    whole = fab.late_by(over, *flows, (*stalls[:2], np.zeros(p)))
    part = fab.late_by(over, *flows, stalls)
    cover = 1.75 * (1 << 20) * 6 / 7 / 12.5  # bytes per us
    # rank 0: its NIC's seven flows (0.9 / 7 each) lose less, its own sends a whole one
    assert part[0] == pytest.approx((0.9 * (200_000.0 - cover) + 0.05 * 200_000.0) / 0.95)
    assert whole[0] == pytest.approx(200_000.0) and (part <= whole).all()


def test_the_hot_points_give_a_nics_chance_beside_the_others():
    rto, p = 200_000.0, 4
    rounds = np.full((p, 40), 80_000.0)
    hot = np.arange(40) % p
    rounds[hot, np.arange(40)] += 20_000.0  # the hot rank's extra bytes
    rounds[hot[:20], np.arange(20)] += rto  # the hot rank late in half its rounds
    others = np.ones((p, 40), dtype=bool)
    others[hot, np.arange(40)] = False
    late_others = np.argwhere(others)[::6]  # and the others in a sixth of theirs
    rounds[late_others[:, 0], late_others[:, 1]] += rto
    q = dict(kind="hot", tier="scaleout", peers=3, bytes=1 << 18, rank_rounds_us=rounds.tolist())
    [(k, chance, nbytes)] = cal.fit_overfill([q], rto, (1 << 18) / 20_000.0 / 1e3)
    o = len(late_others) / others.sum()
    assert (k, nbytes) == (3, 1 << 18)
    assert chance == pytest.approx(1 - 0.5 / (1 - o), abs=1e-4)
    # a round a connection's SYN held 31 s counts neither way
    syn = rounds.copy()
    syn[hot[39], 39] += 31e6  # a hot round on time until then
    [(_, chance_syn, _)] = cal.fit_overfill([{**q, "rank_rounds_us": syn.tolist()}], rto,
                                            (1 << 18) / 20_000.0 / 1e3)  # fmt: skip
    assert chance_syn == pytest.approx(1 - (1 - 20 / 39) / (1 - o), abs=1e-4)
    assert cal.fit_overfill([{**q, "kind": "flows"}], rto, 0.0125) == []
    assert cal.heavy_senders(5, 8, 2, 3) == [6, 7, 0]
    assert cal.heavy_senders(1, 8, 4, 2) == [4, 5]
    assert cal.hot_counts(6) == [2, 4, 6] and cal.hot_counts(4) == [2, 4]
    assert cal.hot_counts(1) == []
    table = FabricTable(scaleup="s", scaleout="n", scaleup_GBps=1.0, scaleup_peer_GBps=1.0,
                        scaleup_latency_us=1.0, scaleout_GBps=0.0125, scaleout_latency_us=50.0,
                        nics_per_node=2, stage_cost_us=0.0, incast_lossy=0.1,
                        incast_lossless=0.0, loss_timeout_us=rto,
                        loss_overfill=[[3, chance, 1 << 18]])  # fmt: skip
    assert table.per_gpu(2, flow_control="lossy").loss_overfill == ((3.0, chance, 262144.0),)
    assert table.per_gpu(2, flow_control="lossless").loss_overfill == ()


def test_hot_bytes_are_measured_on_a_lossy_fabric_only(tmp_path):
    import argparse

    from commbench.errors import UsageError

    p = argparse.ArgumentParser()
    cal.add_arguments(p)
    out = ["--out", str(tmp_path / "p.toml")]
    _, lossy = cal.check_arguments(p.parse_args([*out, "--flow-control", "lossy"]))
    assert lossy["hot_bytes"] == [128 << 10, 256 << 10, 512 << 10]
    _, plain = cal.check_arguments(p.parse_args([*out, "--hot-bytes", "64K"]))
    assert plain["hot_bytes"] == []
    with pytest.raises(UsageError, match="--hot-bytes 0"):
        cal.check_arguments(p.parse_args([*out, "--flow-control", "lossy", "--hot-bytes", "0"]))
