"""A small calibrate-and-predict round on the emulated cluster (root; prefix ``cbv``, its
own cluster, always taken down): ``commbench calibrate`` through ``cluster exec``, then
all-to-allv measured and modelled from the calibrated profile, the table written between
the markers of a doc. Skipped without root and iproute2 (a failure under ``CI=true``)."""

from __future__ import annotations

import json
import math

import pandas as pd
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
        status = validate.main(["--prefix", PREFIX, "--a2a-shapes", "2x2", "--ar-shapes", "",
                                "--a2a-sizes", "256K", "--workloads", "zipf:0.8",
                                "--a2a-impls", "fanout,mpi", "--iters", "2", "--timeout", "240",
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
    assert {r["impl"] for r in rows} == {"fanout", "mpi"}
    for r in rows:
        assert r["nwrong"] == 0 and r["measured_us"] > 0
        assert r["model_us"] > 0 and math.isfinite(r["model_us"] / r["measured_us"])
    text = doc.read_text()
    assert text.startswith("# kept above") and text.rstrip().endswith("kept below")
    assert "old table" not in text and "| 2x2 | deep | alltoallv | zipf:0.8 | 256K |" in text
