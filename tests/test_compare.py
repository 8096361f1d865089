"""``commbench compare`` on constructed records: verdicts, the summary, the exit status
(a regression gate), --impl/--vs within one file, --html, --tiers, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commbench.analysis import compare as cmp
from commbench.cli import main


def point(impl="fanout", size=1 << 20, samples=(), seed=0, **extra) -> dict:
    rec = {
        "run_id": "r",
        "system": "local",
        "collective": "alltoallv",
        "nranks": 8,
        "gpus_per_node": 4,
        "nodes": 2,
        "backend": "cpu",
        "impl": impl,
        "params": {},
        "dtype": "float32",
        "op": None,
        "size_bytes": size,
        "workload": "zipf:0.8",
        "seed": 1,
        "modelled": False,
        "time_us_min": 1.0,
        "time_us_avg": 1.0,
        "time_us_max": 1.0,
    }
    if len(samples):
        rec["iter_time_us"] = [float(x) for x in samples]
        rec["time_us"] = float(np.mean(samples))
    rec.update(extra)
    return rec


def noisy(rng, n, median, spread):
    return median * rng.lognormal(0.0, spread, n)


def runs(tmp_path):
    """BASE and NEW: a point 40% slower, a noisy-but-equal one, and a faster one."""
    rng = np.random.default_rng(11)
    base = [
        point(size=1 << 18, samples=noisy(rng, 20, 100, 0.03)),
        point(size=1 << 20, samples=noisy(rng, 20, 400, 0.5)),
        point(size=1 << 22, samples=noisy(rng, 20, 1600, 0.03)),
    ]
    new = [
        point(size=1 << 18, samples=noisy(rng, 20, 140, 0.03)),  # slower
        point(size=1 << 20, samples=noisy(rng, 20, 400, 0.5)),  # noisy, same law
        point(size=1 << 22, samples=noisy(rng, 20, 1200, 0.03)),  # faster
    ]
    for name, recs in (("base", base), ("new", new)):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "results.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
    return base, new


def test_verdicts_on_a_slower_and_a_noisy_but_equal_point(tmp_path):
    base, new = runs(tmp_path)
    result = cmp.compare(base, new)
    verdicts = {r.key["size_bytes"]: r.verdict for r in result.rows}
    assert verdicts == {1 << 18: cmp.SLOWER, 1 << 20: cmp.SAME, 1 << 22: cmp.FASTER}
    slow = result.rows[0]
    assert 1.2 < slow.ratio.low <= slow.ratio.value <= slow.ratio.high < 1.6
    assert result.exit_status() == 1 and len(result.regressions) == 1
    assert result.summary().startswith("3 points: 1 faster, 1 slower, 1 no difference at 95 %")
    # a tolerance above the slowdown keeps the gate open, and says why
    lenient = cmp.compare(base, new, tolerance=0.8)
    assert lenient.exit_status() == 0
    assert lenient.rows[0].verdict == cmp.TOLERATED and "within tolerance" in lenient.summary()


def test_cli_prints_the_table_and_gates_on_regressions(tmp_path, capsys):
    runs(tmp_path)
    page = tmp_path / "cmp.html"
    status = main(["compare", str(tmp_path / "base"), str(tmp_path / "new"), "--html", str(page)])
    out, err = capsys.readouterr()
    assert status == 1 and "1 point(s) slower beyond their interval" in err
    assert "# 3 points: 1 faster, 1 slower, 1 no difference at 95 %" in out
    assert "slower" in out and "faster" in out and "zipf:0.8@1" in out
    html = page.read_text()
    assert "<table>" in html and "1 slower" in html and "(regression)" in html
    # no regression: NEW against itself
    assert main(["compare", str(tmp_path / "new"), str(tmp_path / "new")]) == 0
    assert "3 no difference" in capsys.readouterr().out


def test_two_implementations_within_one_file(tmp_path, capsys):
    rng = np.random.default_rng(2)
    recs = [
        point("fanout", samples=noisy(rng, 15, 500, 0.05)),
        point("fast", samples=noisy(rng, 15, 300, 0.05)),
        point("spreadout", samples=noisy(rng, 15, 700, 0.05)),
    ]
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["compare", str(path), "--impl", "fast", "--vs", "fanout"]) == 0
    out = capsys.readouterr().out
    assert "# 1 points: 1 faster" in out and "fanout" in out and "spreadout" not in out
    # the other way round is a regression
    assert main(["compare", str(path), "--impl", "fanout", "--vs", "fast"]) == 1
    # without NEW, both are needed
    assert main(["compare", str(path), "--impl", "fast"]) == 2
    assert "give NEW results" in capsys.readouterr().err


def test_pairs_same_names_where_a_point_has_several_and_counts_the_rest():
    rng = np.random.default_rng(4)
    base = [point(i, samples=noisy(rng, 10, 100, 0.01)) for i in ("fast", "fanout", "mpi")]
    new = [point(i, samples=noisy(rng, 10, 100, 0.01)) for i in ("fast", "fanout")]
    new.append(point("fast", size=1 << 10, samples=noisy(rng, 10, 5, 0.01)))
    result = cmp.compare(base, new)
    assert sorted((r.base_impl, r.new_impl) for r in result.rows) == [
        ("fanout", "fanout"),
        ("fast", "fast"),
    ]
    assert (result.only_base, result.only_new) == (1, 1)


def test_records_without_samples_cannot_tell_and_models_are_exact():
    old = [point(time_us=100.0)]  # written before intervals: one number
    rng = np.random.default_rng(1)
    result = cmp.compare(old, [point(samples=noisy(rng, 10, 50, 0.01))])
    assert result.rows[0].verdict == cmp.UNKNOWN and result.exit_status() == 0
    model = dict(point(time_us=100.0), modelled=True, backend="model")
    slower = cmp.compare([model], [dict(model, time_us=110.0)])
    assert slower.rows[0].verdict == cmp.SLOWER and slower.rows[0].ratio.low == pytest.approx(1.1)
    # measured and modelled points never match each other
    assert not cmp.compare([model], [point(samples=[1.0, 2.0])]).rows


def test_merges_launches_and_shows_tiers(tmp_path, capsys):
    rng = np.random.default_rng(8)
    base = [point(samples=noisy(rng, 10, 100, 0.05), launch=k) for k in (1, 2, 3)]
    new = [point(samples=noisy(rng, 10, 100, 0.05), launch=k) for k in (1, 2, 3)]
    row = cmp.compare(base, new).rows[0]
    assert (row.base.launches, row.base.samples) == (3, 30)
    for name, recs in (("b.jsonl", base), ("n.jsonl", new)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    # --tiers: the records have none; the matrix is made again from workload, seed, size
    assert main(["compare", str(tmp_path / "b.jsonl"), str(tmp_path / "n.jsonl"), "--tiers"]) == 0
    out = capsys.readouterr().out
    assert "base tiers" in out and "NIC " in out and "GB/s (" in out  # local profile's rate


def test_nothing_matches_is_an_error(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(point(samples=[1.0, 2.0])) + "\n")
    b.write_text(json.dumps(point(samples=[1.0, 2.0], nranks=16)) + "\n")
    assert main(["compare", str(a), str(b)]) == 2
    assert "no point of" in capsys.readouterr().err
