"""A small calibrate-and-predict round on the emulated cluster (root; prefix ``cbv``, its
own cluster, always taken down): ``commbench calibrate`` through ``cluster exec``, then
all-to-allv measured and modelled from the calibrated profile, the table written between
the markers of a doc. Skipped without root and iproute2 (a failure under ``CI=true``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import tomllib

from commbench.benchmarks import validate
from commbench.cluster import netns
from commbench.jobs.profile import parse_profile
from tests.test_cluster import _require_privileges

PREFIX = "cbv"


def test_calibrate_then_predict_on_a_2x2_cluster(tmp_path):
    _require_privileges()
    doc = tmp_path / "doc.md"
    doc.write_text(f"# kept above\n\n{validate.BEGIN}\nold table\n{validate.END}\n\nkept below\n")
    out = tmp_path / "run"
    try:
        status = validate.main(["--prefix", PREFIX, "--a2a-shapes", "2x2", "--ar-shapes", "2x2",
                                "--a2a-sizes", "256K", "--workloads", "zipf:0.8",
                                "--a2a-impls", "fanout,mpi", "--ar-sizes", "256",
                                "--ar-impls", "ring", "--iters", "2", "--passes", "1",
                                "--timeout", "240",
                                "--out", str(out), "--doc", str(doc)])  # fmt: skip
    finally:
        netns.remove(PREFIX, netns.state_dir(PREFIX))
    assert status == 0
    assert not netns.namespaces_with_prefix(PREFIX)
    profile = out / "profile-2x2-deep.toml"
    prof = parse_profile(tomllib.loads(profile.read_text()), profile)
    assert prof.fabric.sources["scaleout_latency_us"].startswith("measured: calibrate-")
    assert 0 < prof.fabric.scaleout_GBps < 1  # a shaped NIC, not shared memory
    points = pd.read_json(out / "profile-2x2-deep.points.jsonl", lines=True)
    assert "calibrate" not in set(points["kind"]) and {"stream", "allnics"} <= set(points["kind"])
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert {r["impl"] for r in rows} == {"fanout", "mpi", "ring"}
    # all-reduce modelled from the step costs measured again before its launch (pooled)
    ring = next(r for r in rows if r["impl"] == "ring")
    assert ring["profile"] == "profile-2x2-deep-steps.toml"
    assert all(r["profile"] is None for r in rows if r["collective"] == "alltoallv")
    steps = out / ring["profile"]
    pooled = parse_profile(tomllib.loads(steps.read_text()), steps)
    assert "median of 1 calibrate --update runs" in pooled.fabric.sources["stage_cost_us"]
    assert pooled.fabric.sources["scaleout_GBps"] == prof.fabric.sources["scaleout_GBps"]
    assert (out / "profile-2x2-deep-steps-r1-ring.toml").exists()
    for r in rows:
        assert r["nwrong"] == 0 and r["measured_us"] > 0
        assert r["model_us"] > 0 and math.isfinite(r["model_us"] / r["measured_us"])
    text = doc.read_text()
    assert text.startswith("# kept above") and text.rstrip().endswith("kept below")
    assert "old table" not in text and "| 2x2 | deep | alltoallv | zipf:0.8 | 256K |" in text
    # calibrated twice: the drift of the key constants is in every row and in the table
    assert (out / "profile-2x2-deep-after.toml").exists()
    assert all("scaleout_latency_us" in r["drift"] for r in rows)
    assert all("butterfly_step_us" in r["drift"] for r in rows)  # calibrate's chains
    assert "Calibration drift" in text


def test_tables_redraw_the_drift_and_remodel_from_the_saved_profile(tmp_path, capsys):
    """No cluster: rows of an earlier run (one without a second calibration) redrawn."""
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile
    from commbench.model import calibrate as cal
    from tests.test_calibrate import points

    c, why = cal.fit(points(), gpus_per_node=2, nranks=4)
    base = load_toml(load_profile("local-cluster").path)
    data = cal.profile_data(base, "profile-2x2-deep", c, why, "r", 2, "lossless")
    (tmp_path / "profile-2x2-deep.toml").write_text(cal.dump_toml(data))
    moved = {"scaleout_latency_us": [100.0, 250.0], "stage_cost_us": [500.0, 450.0]}
    row = dict(shape="2x2", queue="deep", collective="allreduce", workload=None, size=4096,
               impl="mpi", measured_us=20000.0, model_us=None, algo=None, nwrong=0)  # fmt: skip
    rows = [{**row, "drift": moved}, {**row, "shape": "4x1", "impl": "ring"}]
    path = tmp_path / "rows.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    assert validate.drift_summary(moved) == "lat x2.50"
    assert validate.drift({"msg_us": 1.0, "x": 2.0}, {"msg_us": 3.0}) == {"msg_us": [1.0, 3.0]}
    assert validate.main(["--tables", str(path)]) == 0
    text = capsys.readouterr().out
    assert (
        "| 2x2 | deep | allreduce | - | 4K | mpi | 20.00 | - | n/a | n/a | n/a | lat x2.50 |"
        in text
    )
    assert "| 4x1 | deep | allreduce | - | 4K | ring | 20.00 | - | n/a | n/a | n/a | - |" in text
    assert "| 2x2 | deep | 100 -> 250 | 500 -> 450 |" in text
    # several runs, each a part of the point list: one table under their headers
    other = tmp_path / "other"
    other.mkdir()
    (other / "header.md").write_text("Run two (the all-to-allv part).\n")
    a2a = {**row, "collective": "alltoallv", "workload": "uniform", "impl": "fanout",
           "drift": moved}  # fmt: skip
    pd.DataFrame([a2a]).to_json(other / "rows.jsonl", orient="records", lines=True)
    assert validate.main(["--tables", str(path), str(other / "rows.jsonl")]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"Measured in {tmp_path}.\n\nRun two (the all-to-allv part).\n\n")
    assert "| 2x2 | deep | alltoallv | uniform | 4K | fanout |" in text and "| 4x1 |" in text
    for run in (tmp_path.name, "other"):  # the drift of each run's calibrations
        assert f"| {run} | 2x2 | deep | 100 -> 250 | 500 -> 450 |" in text
    # a point measured again by a run listed later is that run's
    again = tmp_path / "again"
    again.mkdir()
    pd.DataFrame([{**a2a, "measured_us": 30000.0}]).to_json(again / "rows.jsonl",
                                                            orient="records", lines=True)  # fmt: skip
    runs = [str(path), str(other / "rows.jsonl"), str(again / "rows.jsonl")]
    assert validate.main(["--tables", *runs]) == 0
    text = capsys.readouterr().out
    assert "| 2x2 | deep | alltoallv | uniform | 4K | fanout | 30.00 |" in text
    assert "| 2x2 | deep | alltoallv | uniform | 4K | fanout | 20.00 |" not in text
    assert "1 point measured again by a run listed after theirs" in text
    assert validate.main(["--tables", str(path), str(other / "none.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"validate: error: --tables {other}/none.jsonl")
    pd.DataFrame(rows[:1]).to_json(path, orient="records", lines=True)
    assert validate.main(["--tables", str(path), "--remodel"]) == 0
    text = capsys.readouterr().out
    assert "| 2x2 | deep | allreduce | - | 4K | mpi (han(" in text and "lat x2.50 |" in text
    # a row modelled from another profile (pooled step costs) is remodelled from it
    slow = cal.profile_data(base, "profile-2x2-deep-steps",
                            {**c, "stage_cost_us": 10 * c["stage_cost_us"]}, why, "r", 2,
                            "lossless")  # fmt: skip
    (tmp_path / "profile-2x2-deep-steps.toml").write_text(cal.dump_toml(slow))
    pooled = {**row, "profile": "profile-2x2-deep-steps.toml"}
    pd.DataFrame([row, pooled]).to_json(path, orient="records", lines=True)
    plain, stepped = validate.remodel(pd.read_json(path, lines=True).to_dict("records"),
                                      tmp_path, 7, {"allreduce": 5})  # fmt: skip
    assert stepped["model_us"] > plain["model_us"] > 0


def test_pooled_step_costs_are_the_median_of_the_updates(tmp_path):
    """Three ``--update`` runs of one profile: the pooled profile's step constants are
    fitted from each step point's median over them, every other constant kept."""
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile
    from commbench.model import calibrate as cal
    from tests.test_calibrate import points

    def write(path, data, rows):
        path.write_text(cal.dump_toml(data))
        cal.points_path(path).write_text("".join(json.dumps(q) + "\n" for q in rows))

    old = [{"run": "r0", **q} for q in points(lat=100.0, stage=500.0)]
    c, why = cal.fit(old, gpus_per_node=2, nranks=4)
    data = cal.profile_data(load_toml(load_profile("local-cluster").path), "main", c, why,
                            "r0", 2, "lossless")  # fmt: skip
    main = tmp_path / "main.toml"
    write(main, data, old)
    updates = []
    for i, (lat, stage) in enumerate(((150.0, 300.0), (90.0, 900.0), (120.0, 400.0))):
        fresh = [q for q in points(lat=lat, stage=stage) if q["kind"] in cal.STEP_KINDS]
        new, merged, _ = cal.refresh_steps(data, old, fresh, f"r{i + 1}", f"u{i}", 2, 4)
        updates.append(tmp_path / f"u{i}.toml")
        write(updates[-1], new, merged)
    out = tmp_path / "pooled.toml"
    constants = cal.pool_updates(main, updates, out)
    prof = parse_profile(tomllib.loads(out.read_text()), out)
    assert prof.name == "pooled" and constants["scaleout_latency_us"] == 120.0
    assert prof.fabric.scaleout_latency_us == 120.0
    # the stage point's median (lat + 2 msg + stage: 1). 480, 2). 1030, 3). 560)
    assert prof.fabric.stage_cost_us == pytest.approx(560.0 - 120.0 - 2 * 20.0)
    assert prof.fabric.sources["stage_cost_us"].startswith(
        "measured: median of 3 calibrate --update runs, r1 .. r3: "
    )
    assert prof.fabric.scaleout_GBps == c["scaleout_GBps"]
    assert prof.fabric.sources["scaleout_GBps"] == data["fabric"]["sources"]["scaleout_GBps"]
    rows = pd.read_json(cal.points_path(out), lines=True)
    assert len(rows) == len(old) and (rows[rows["kind"] == "stage"]["time_us"] == 560.0).all()


def test_refit_fits_a_run_s_profiles_again_and_pools_their_steps_again(tmp_path, capsys):
    """``--tables --remodel --refit``: each full calibration fitted again from its raw
    points (here: points with the median rank's time, written by a fit that ignored it),
    its step profile pooled again over the refitted one; the run's files untouched."""
    from commbench.config import load_toml
    from commbench.jobs.profile import load_profile
    from commbench.model import calibrate as cal
    from tests.test_calibrate import points, with_median

    def write(path, data, rows):
        path.write_text(cal.dump_toml(data))
        cal.points_path(path).write_text("".join(json.dumps(q) + "\n" for q in rows))

    old = [{"run": "r0", **q} for q in with_median(points(cap=0.03), {1: 1.21})]
    c, why = cal.fit(points(cap=0.03), gpus_per_node=2, nranks=4)  # without the median
    data = cal.profile_data(load_toml(load_profile("local-cluster").path),
                            "profile-2x2-deep", c, why, "r0", 2, "lossless")  # fmt: skip
    main = tmp_path / "profile-2x2-deep.toml"
    write(main, data, old)
    fresh = [q for q in points(stage=900.0) if q["kind"] in cal.STEP_KINDS]
    new, merged, _ = cal.refresh_steps(data, old, fresh, "r1", "u", 2, 4)
    write(tmp_path / "profile-2x2-deep-steps-r1-ring.toml", new, merged)
    write(tmp_path / "profile-2x2-deep-after.toml", data, old)  # not refitted
    before = main.read_text()
    row = dict(shape="2x2", queue="deep", collective="allreduce", workload=None,
               size=1 << 20, impl="ring", measured_us=2e5, model_us=None, algo=None,
               nwrong=0, profile="profile-2x2-deep-steps.toml")  # fmt: skip
    path = tmp_path / "rows.jsonl"
    pd.DataFrame([row]).to_json(path, orient="records", lines=True)
    assert validate.main(["--tables", str(path), "--refit"]) == 2
    assert "--refit goes with --remodel" in capsys.readouterr().err
    assert validate.main(["--tables", str(path), "--remodel", "--refit"]) == 0
    assert "fitted again from their raw points" in capsys.readouterr().out
    refit = tmp_path / "refit"
    assert sorted(f.name for f in refit.glob("*.toml")) == [
        "profile-2x2-deep-steps.toml", "profile-2x2-deep.toml"]  # fmt: skip
    prof = parse_profile(tomllib.loads((refit / main.name).read_text()), refit / main.name)
    assert prof.fabric.fabric_tail == [[1, pytest.approx(1.1, rel=1e-3)]]
    steps = parse_profile(
        tomllib.loads((refit / row["profile"]).read_text()), refit / row["profile"]
    )
    assert steps.fabric.fabric_tail == prof.fabric.fabric_tail
    assert steps.fabric.stage_cost_us == pytest.approx(900.0)
    assert main.read_text() == before and not (tmp_path / "profile-2x2-deep-steps.toml").exists()
    # a profile whose raw points are gone: one line, exit 2, the last refit left as it was
    cal.points_path(main).unlink()
    kept = (refit / main.name).read_text()
    assert validate.main(["--tables", str(path), "--remodel", "--refit"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("validate: error: --refit: ") and "raw points" in err
    assert len(err.strip().splitlines()) == 1 and (refit / main.name).read_text() == kept
    assert not list(tmp_path.glob(".refit-*"))


def test_a_workload_a_shape_cannot_run_is_refused_before_any_cluster(tmp_path, capsys):
    # the default trace is folded to 8 ranks; a 2x2 shape has 4 (no root needed: refused
    # before the preflight)
    out = tmp_path / "never"
    assert validate.main(["--a2a-shapes", "2x2", "--ar-shapes", "", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("validate: error: trace ") and "run it with 8 ranks" in err
    assert not out.exists()


def test_a_bad_tcp_congestion_is_refused_before_any_cluster(tmp_path, capsys):
    out = tmp_path / "never"
    argv = ["--a2a-shapes", "4x2", "--ar-shapes", "", "--tcp-congestion", "bbr;", "--out", str(out)]
    assert validate.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("validate: error: bad --tcp-congestion 'bbr;'") and not out.exists()


def test_a_bad_lossy_fabric_size_is_refused_before_any_cluster(tmp_path, capsys):
    out = tmp_path / "never"
    argv = ["--a2a-shapes", "4x2", "--ar-shapes", "", "--queues", "shallow",
            "--lossy-fabric-bytes", "512K,4Q", "--out", str(out)]  # fmt: skip
    assert validate.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("validate: error: ") and "4Q" in err and not out.exists()


def test_the_table_shows_how_far_apart_a_point_s_launches_are():
    """No cluster: a point measured in two launches keeps both; the table gives their
    spread, and says how many points' launches are further apart than the band is wide."""
    rec = dict(collective="allreduce", workload=None, size_bytes=4096, impl="ring", nwrong=0)
    measured = [{**rec, "time_us": 1000.0}, {**rec, "time_us": 1500.0},
                {**rec, "impl": "mpi", "time_us": 800.0}, {**rec, "impl": "mpi", "time_us": 840.0}]  # fmt: skip
    model = [{**rec, "time_us": 1300.0}, {**rec, "impl": "mpi", "time_us": 820.0}]
    rows = validate.rows_of("4x2", "deep", measured, model)
    ring = next(r for r in rows if r["impl"] == "ring")
    assert ring["launches_us"] == [1000.0, 1500.0] and ring["measured_us"] == 1250.0
    assert validate.launch_spread(ring["launches_us"]) == 1.5
    assert validate.launch_spread([900.0]) == validate.launch_spread(None) == 1.0
    text = validate.table(pd.DataFrame(rows))
    assert "| 4x2 | deep | allreduce | - | 4K | ring | 1.25 | x1.50 | 1.30 | 1.04 | yes |" in text
    assert "| 4K | mpi | 0.82 | x1.05 | 0.82 | 1.00 | yes |" in text
    assert "2 of 2 modelled points within" in text
    assert "(launch spread above 1.35: no one prediction" in text
    assert "within the band of each launch): 1 points, 1 of them in band." in text
    assert "Out of band" not in text  # every point in band: no list
    far = validate.rows_of("4x2", "deep", [{**rec, "impl": "rabenseifner", "time_us": 500.0}],
                           [{**rec, "impl": "rabenseifner", "time_us": 1000.0}])  # fmt: skip
    text = validate.table(pd.DataFrame(rows + far))
    assert "Out of band (1):" in text
    assert "| deep | allreduce | 4x2 | rabenseifner | - | 4K | 2.00 | - |" in text
    assert "| deep | allreduce | 4x2 | ring |" not in text


def test_late_report_counts_the_samples_a_timeout_made_late(tmp_path):
    """``--tables --late``: per launch, the (rank, call) samples more than half the
    calibrated timeout over their rank's fastest call, from the harness's raw samples;
    a shape whose profile has no timeout (a lossless fabric) is left out."""
    t = 200_000.0
    on_time = np.full((4, 5), 50_000.0) + np.arange(5) * 100.0
    late = on_time.copy()
    late[0, 1] += t
    late[2, 1] += t
    late[3, 4] += t
    assert validate.late_samples(late, t) == (3 / 20, 2 / 5)
    assert validate.late_samples(on_time, t) == (0.0, 0.0)
    for queue, timeout in (("shallow", t), ("deep", None)):
        fabric = f"loss_timeout_us = {timeout}\n" if timeout else ""
        (tmp_path / f"profile-2x2-{queue}.toml").write_text(f"[fabric]\n{fabric}")
        stem = tmp_path / f"measured-2x2-{queue}-alltoallv"
        stem.with_suffix(".jsonl").write_text(json.dumps(
            {"run_id": "r", "point": 0, "workload": "uniform", "size_bytes": 1 << 20,
             "impl": "fanout"}) + "\n")  # fmt: skip
        stem.with_suffix(".raw.jsonl").write_text(
            json.dumps({"run_id": "r", "point": 0, "samples_us": late.tolist()}) + "\n"
        )
    lines = validate.late_report([tmp_path]).splitlines()
    assert lines[2:] == [f"| {tmp_path.name} | measured-2x2-shallow-alltoallv | uniform | 1M | "
                         "fanout | 1 | 0.15 | 0.40 |"]  # fmt: skip


def test_the_points_out_say_whether_the_model_lies_in_their_reading_s_interval(tmp_path):
    """No cluster: a row's reading's 95 % interval comes from the run's raw samples
    (``interval_us``, a bootstrap over its launches' calls); the list of points out of
    band gives it, says whether the model lies in it and counts those that do. A row
    whose run kept no raw samples has none ("-")."""
    rng = np.random.default_rng(5)
    stem = tmp_path / "measured-4x2-shallow-alltoallv"
    recs, raws = [], []
    for launch in range(2):
        for point, impl in enumerate(("fanout", "mpi", "fast")):
            samples = 75e3 + 157e3 * (rng.random((8, 5)) < 0.3) if impl != "fast" else \
                np.full((8, 5), 100e3)  # fmt: skip
            rid = f"r{launch}{impl}"
            recs.append(dict(run_id=rid, point=point, collective="alltoallv", impl=impl,
                             workload="uniform", size_bytes=1 << 20, nwrong=0,
                             time_us=float(samples.mean(axis=1).max())))  # fmt: skip
            raws.append(dict(run_id=rid, point=point, samples_us=samples.tolist()))
    stem.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    stem.with_suffix(".raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raws))
    rows = validate.rows_of("4x2", "shallow", recs, [
        {**recs[0], "time_us": 1.0}, {**recs[1], "time_us": recs[1]["time_us"] * 1.5},
        {**recs[2], "time_us": 50e3}])  # fmt: skip
    got = validate.with_intervals(rows, tmp_path)
    by = {r["impl"]: r for r in got}
    for r in got:
        low, high = r["interval_us"]
        assert low <= r["measured_us"] <= high
    assert by["fast"]["interval_us"] == [100e3, 100e3]
    assert validate.with_intervals(rows, tmp_path / "elsewhere") == rows  # no raw samples
    # out of band: below its interval, inside its wide one, none kept
    row = dict(queue="shallow", collective="alltoallv", shape="4x2", workload="uniform",
               size=1 << 20, measured_us=200e3, launches_us=[190e3, 210e3])  # fmt: skip
    text = validate.out_of_band(pd.DataFrame([
        {**row, "impl": "fanout", "model_us": 150e3, "interval_us": [180e3, 260e3]},
        {**row, "impl": "mpi", "model_us": 240e3, "interval_us": [170e3, 250e3]},
        {**row, "impl": "fast", "model_us": 100e3},
        {**row, "impl": "fast+sched", "model_us": 200e3, "interval_us": [199e3, 201e3]},
    ]))  # fmt: skip
    assert "Out of band (3):" in text
    assert "| fanout | uniform | 1M | 0.75 | x1.11 | 180.00-260.00 | no |" in text
    assert "| mpi | uniform | 1M | 1.20 | x1.11 | 170.00-250.00 | yes |" in text
    assert "| fast | uniform | 1M | 0.50 | x1.11 | - | - |" in text
    assert "1 of the 3 have the model inside their reading's 95 % interval" in text


def test_a_model_that_fails_leaves_the_measured_points(tmp_path, monkeypatch, capsys):
    """No cluster (its steps stubbed): the model of a shape runs past its timeout, and
    the run keeps the shape's measured points, unmodelled, says so in one line and goes
    on (the second calibration failing too)."""
    import subprocess
    from types import SimpleNamespace

    calls = []

    def calibrate(prefix, out, *rest):
        calls.append(out.name)
        if len(calls) > 1:
            raise RuntimeError("calibrate: exit 1")
        return out

    def modelled(*_args):
        raise subprocess.TimeoutExpired(["commbench", "simulate"], 900)

    rec = dict(collective="alltoallv", workload="uniform", size_bytes=1 << 20,
               impl="spreadout", time_us=100e3, nwrong=0)  # fmt: skip
    monkeypatch.setattr(validate, "load_emulated_profile", lambda name: SimpleNamespace(
        cluster_spec=lambda *a, **k: None, nic_mbit=lambda shm: 100.0))  # fmt: skip
    monkeypatch.setattr(validate, "netns", SimpleNamespace(
        state_dir=lambda prefix: tmp_path, namespaces_with_prefix=lambda prefix: [],
        up=lambda spec, folder: None, remove=lambda prefix, folder: None))  # fmt: skip
    monkeypatch.setattr(validate, "calibrate", calibrate)
    monkeypatch.setattr(validate, "measure", lambda *a: [rec])
    monkeypatch.setattr(validate, "modelled", modelled)
    args = SimpleNamespace(prefix="t", tcp_congestion=None, out=tmp_path, passes=1, timeout=10,
                           lossy_fabric_bytes=None, fabric_bytes=None, pool_steps=False,
                           rounds=1, iters=5, ar_iters=5, seed=7)  # fmt: skip
    kept: list[dict] = []
    jobs = [("alltoallv", ["spreadout"], [1 << 20], ["uniform"])]
    validate.run_cluster(2, 4, "shallow", 10.0, jobs, args, kept)
    assert [(r["impl"], r["measured_us"], r["model_us"]) for r in kept] == [
        ("spreadout", 100e3, None)]  # fmt: skip
    out = capsys.readouterr().out
    assert "2x4-shallow alltoallv: the model failed" in out
    assert "the second calibration failed" in out
