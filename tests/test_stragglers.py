"""Stragglers (analysis.stragglers): which rank is slowest how often and by how much, per
node, from records' per-rank times and the raw side file's per-iteration samples; the
report's section and ``commbench report --stragglers``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from commbench.analysis.load import load_all, load_raw_samples, normalise_points
from commbench.analysis.report import write_report
from commbench.analysis.stragglers import straggler_tables, straggler_text
from commbench.cli import main as commbench
from commbench.jobs.external import _device_layout
from tests.test_analysis_data import make_record

AG4 = (
    Path(__file__).resolve().parent
    / "fixtures"
    / "external"
    / "nccl-tests-all_gather-J-I-4proc.json"
)


def _point(size: int, times: list[float], **extra) -> dict:
    rec = make_record(size_bytes=size, nodes=2, gpus_per_node=4, system="s")
    rec.update(rank_time_us=times, run_id="r", point=size, **extra)
    return rec


def _slow_rank_5() -> list[dict]:
    """Four points on 2 nodes x 4: rank 5 is 20 us (20 %) above the median on three of
    them, rank 2 10 us on the fourth; rank 1 a little slow everywhere, never the slowest."""
    recs = []
    for p in range(4):
        times = [100.0] * 8
        times[1] = 101.0
        if p < 3:
            times[5] = 120.0
        else:
            times[2] = 110.0
        recs.append(_point(p, times))
    return recs


def _samples(seed: int = 0) -> list[list[float]]:
    """8 ranks x 20 iterations: rank 6 is 50 us slower in 17 of them, faster in the rest."""
    rng = np.random.default_rng(seed)
    s = 100 + rng.random((8, 20))
    s[6, :17] += 50
    s[6, 17:] -= 1
    return s.tolist()


def test_the_slowest_rank_per_point_with_its_lead_and_node():
    ranks, nodes = straggler_tables(normalise_points(_slow_rank_5()))
    assert list(ranks["rank"]) == [5, 2]
    five = ranks.iloc[0]
    assert (five.node, five.points, five.slowest_points) == (1, 4, 3)
    assert five.point_excess_us == pytest.approx(20.0)
    assert five.point_excess_pct == pytest.approx(20.0)
    two = ranks.iloc[1]
    assert (two.node, two.slowest_points, two.point_excess_us) == (0, 1, pytest.approx(10.0))
    assert list(nodes["node"]) == [0, 1] and list(nodes["ranks"]) == ["0-3", "4-7"]
    assert list(nodes["slowest_points"]) == [1, 3] and list(nodes["slowest_rank"]) == [2, 5]
    assert list(nodes["point_excess_us"]) == pytest.approx([10.0, 20.0])
    assert (nodes["iterations"] == 0).all() and nodes["iter_excess_us"].isna().all()


def test_per_iteration_samples_and_the_node_summary():
    recs = _slow_rank_5()
    samples = [None, _samples(1), None, _samples(2)]
    ranks, nodes = straggler_tables(normalise_points(recs), samples)
    six = ranks[ranks["rank"] == 6].iloc[0]
    assert (six.node, six.iterations, six.slowest_iterations, six.slowest_points) == (1, 40, 34, 0)
    assert 49 < six.iter_excess_us < 51 and 48 < six.iter_excess_pct < 51
    assert ranks["slowest_iterations"].sum() == 40  # every iteration has one straggler
    node1 = nodes[nodes["node"] == 1].iloc[0]
    assert node1.slowest_iterations >= 34 and node1.slowest_points == 3
    assert node1.slowest_rank == 5  # most slowest points first, then iterations
    assert nodes["slowest_iterations"].sum() == 40


def test_records_without_per_rank_times_are_skipped():
    plain = make_record(nodes=2, gpus_per_node=4)
    plain["rank_time_us"] = None
    modelled = make_record(nodes=2, gpus_per_node=4, modelled=True)
    modelled["rank_time_us"] = [1.0] * 7 + [9.0]
    short = _point(1, [1.0, 9.0])  # not one value per rank
    single = make_record(nodes=1, gpus_per_node=1)
    flat = _point(2, [5.0] * 8)  # every rank alike: nobody straggles
    points = normalise_points([plain, modelled, short, single, flat])
    ranks, nodes = straggler_tables(points, [None, None, [[1.0, 2.0]] * 2, None, None])
    assert ranks.empty
    assert list(nodes["points"]) == [1, 1] and (nodes["slowest_points"] == 0).all()
    assert "no measured record with per-rank times" in straggler_text(*straggler_tables(points[:2]))


def _write_run(folder: Path) -> Path:
    """Results and raw side file as ``commbench run`` writes them (latency mode)."""
    folder.mkdir()
    recs = _slow_rank_5()
    raws = []
    for rec, samples in zip(recs, [_samples(1), None, None, _samples(2)], strict=True):
        if samples is not None:
            rec["raw_file"] = "run.raw.jsonl"
            raws.append({"run_id": "r", "point": rec["point"], "inplace": None,
                         "samples_us": samples})  # fmt: skip
    (folder / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "run.raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raws))
    return folder


def test_raw_samples_are_found_next_to_their_records(tmp_path):
    points, _ = load_all(_write_run(tmp_path / "run"))
    samples = load_raw_samples(points)
    assert [s is not None for s in samples] == [True, False, False, True]
    assert np.array(samples[3]).shape == (8, 20)


def test_cli_prints_the_tables_and_writes_no_report(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert commbench(["report", "--stragglers", str(_write_run(tmp_path / "run"))]) == 0
    out = capsys.readouterr().out
    assert "stragglers per node" in out and "stragglers per rank" in out
    # node, rank, slowest in points, its lead (us, %), slowest in iterations, their lead
    assert re.search(r"^\s+s\s+2×4\s+1\s+5\s+3 of 4 \(75%\)\s+20 \(20\.0%\)", out, re.M)
    assert re.search(r"^\s+s\s+2×4\s+1\s+6\s+0 of 4 \(0%\)\s+34 of 40 \(85%\)\s+\d+", out, re.M)
    assert not (tmp_path / "report.html").exists()


def test_imported_nccl_tests_per_iteration_times(tmp_path, capsys):
    out = tmp_path / "imported.jsonl"
    assert commbench(["import", "nccl-tests", str(AG4), "--out", str(out), "--system", "x"]) == 0
    points, _ = load_all(out)
    assert list(points["nodes"].unique()) == [2] and list(points["gpus_per_node"].unique()) == [2]
    ranks, nodes = straggler_tables(points, load_raw_samples(points))
    assert ranks.iloc[0]["rank"] == 2 and ranks.iloc[0]["node"] == 1  # process 2, node-b
    assert ranks.iloc[0]["slowest_points"] == 4 and ranks.iloc[0]["slowest_iterations"] == 12
    assert list(nodes["ranks"]) == ["0-1", "2-3"]


@pytest.mark.parametrize("name", ["r.html", "r.md"])
def test_the_report_has_a_stragglers_section(tmp_path, name):
    text = write_report([_write_run(tmp_path / "run")], tmp_path / name).read_text()
    assert "Stragglers" in text and "Per rank: the ranks that were the slowest" in text
    assert "3 of 4 (75%)" in text and "34 of 40 (85%)" in text


@pytest.mark.parametrize(
    "hosts, layout",
    [("aabb", (2, 2)), ("aaabbb", (2, 3)), ("abab", (None, None)), ("aab", (None, None)),
     ("aabbba", (None, None)), ("", (None, None))],
)  # fmt: skip
def test_j_import_layout_from_the_devices_hosts(hosts, layout):
    devices = [{"rank": r, "hostname": h} for r, h in enumerate(hosts)]
    assert _device_layout(devices[::-1]) == layout
