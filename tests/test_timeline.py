"""``commbench run --timeline``: the spans of every rank's timed calls, stored beside the
records, cover the calls the harness measured; the report reads and draws them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from commbench.analysis import load_all
from commbench.analysis.figures import empty_message, render_all
from commbench.analysis.load import load_raw_samples
from commbench.analysis.report import write_report
from commbench.analysis.timeline import (
    direction_table,
    exchange_lateness,
    figure_8,
    lateness_table,
    load_timeline,
    rank_step_ends,
    stall_table,
    timeline_breakdown,
    untraced,
    wait_stalls,
)
from commbench.harness.results import RecordWriter
from commbench.kernels import timeline
from tests.mpirun import run_mpi

#: (collective, impl, extra args): library baselines (one span per call) and algorithms
#: with steps, on 2 emulated nodes x 4 ranks; latency timing (one sample per call).
CASES = (
    ("allreduce", "mpi", ["-b", "1K", "-e", "1K"]),
    ("allreduce", "ring", ["-b", "1K", "-e", "4K", "-f", "4"]),
    ("allreduce", "nvrar", ["-b", "1K", "-e", "4K", "-f", "4"]),
    ("allreduce", "recursive-doubling", ["-b", "16K", "-e", "16K"]),
    ("alltoallv", "fast", ["-b", "16K", "-e", "16K", "--workload", "zipf:0.8"]),
    ("alltoallv", "fast+sched", ["-b", "16K", "-e", "16K", "--workload", "zipf:0.8"]),
    ("alltoallv", "pxn", ["-b", "16K", "-e", "16K", "--workload", "random@3"]),
    ("alltoallv", "spreadout", ["-b", "16K", "-e", "16K", "--workload", "zipf:0.8"]),
)
DRIVER_RUNS = {
    **{f"timeline/{impl}": (8, [coll, "--impl", impl, "--gpus-per-node", "4", *extra,
                                "-n", "3", "-w", "1", "--timing", "latency", "--timeline",
                                "--out", "{tmp}/timeline/latency.jsonl"])
       for coll, impl, extra in CASES},
    "timeline/pipelined": (8, ["alltoallv", "--impl", "fanout", "--gpus-per-node", "4",
                               "-b", "16K", "-e", "16K", "-n", "3", "-w", "1", "--timeline",
                               "--out", "{tmp}/timeline/pipelined.jsonl"]),
}  # fmt: skip

#: Time of a call outside its algorithm's spans: only the harness's return and clock read
#: after the last span (~1-3 µs against calls of >= 100 µs on 8 ranks); a rank preempted
#: in that window (8 ranks share 2 cores) loses a scheduler slice, so the bound is on a
#: point's total over its ranks and calls, not on each call.
UNCOVERED = 0.05


@pytest.fixture(scope="module")
def latency(driver_runs):
    for _, impl, _ in CASES:
        driver_runs.stdout(f"timeline/{impl}")
    path = driver_runs.tmp / "timeline" / "latency.jsonl"
    points, _ = load_all(path)
    raw = [json.loads(line) for line in path.with_name("latency.raw.jsonl").open()]
    return points, load_timeline(points), raw


def test_timeline_file_is_named_in_every_record(latency):
    points, spans, _ = latency
    assert len(points) == 1 + 2 + 2 + 1 + 4
    assert (points["timeline_file"] == "latency.timeline.jsonl").all()
    assert (points["timed_loop"] == "python").all()  # mpi too: the C loop cannot stamp calls
    assert (points["nwrong"] == 0).all()
    assert set(spans["impl"]) == {impl for _, impl, _ in CASES}
    assert spans.groupby(["run_id", "point"])["rank"].nunique().eq(8).all()


@pytest.mark.parametrize("impl", [impl for _, impl, _ in CASES])
def test_call_spans_are_the_measured_calls_and_steps_tile_them(latency, impl):
    points, spans, raw = latency
    samples = {(r["run_id"], r["point"]): np.asarray(r["samples_us"]) for r in raw}
    mine = spans[spans["impl"] == impl]
    assert not mine.empty
    for (run, point), part in mine.groupby(["run_id", "point"]):
        calls = part[part["kind"] == "call"].sort_values(["rank", "call"])
        measured = samples[(run, point)]  # ranks x calls
        assert len(calls) == measured.size == 8 * 3
        took = (calls["end_us"] - calls["start_us"]).to_numpy().reshape(8, 3)
        np.testing.assert_allclose(took, measured, rtol=1e-9, atol=1e-3)
        inner = part[part["kind"] != "call"]
        if impl == "mpi":  # a library call: one span per call
            assert inner.empty
            continue
        assert set(inner["kind"]) <= set(timeline.KINDS) and (inner["step"] >= -1).all()
        covered = 0.0
        for (rank, call), steps in inner.groupby(["rank", "call"]):
            whole = calls[(calls["rank"] == rank) & (calls["call"] == call)].iloc[0]
            steps = steps.sort_values("start_us")
            start, end = steps["start_us"].to_numpy(), steps["end_us"].to_numpy()
            assert start[0] >= whole["start_us"] and end[-1] <= whole["end_us"]
            np.testing.assert_allclose(start[1:], end[:-1])  # no gaps, no overlaps
            covered += end[-1] - start[0]
        total = took.sum()
        assert covered <= total and covered >= (1 - UNCOVERED) * total, (covered, total)


@pytest.mark.parametrize("impl", ["ring", "recursive-doubling", "nvrar"])
def test_loop_start_lines_ranks_up_on_one_clock(latency, impl):
    """The ranks share this machine's clock: on it no rank ends an all-reduce before every
    rank has started that call (each result needs every rank's data), and every rank's
    loop starts within a second of the others'."""
    _, spans, _ = latency
    calls = spans[(spans["impl"] == impl) & (spans["kind"] == "call")]
    assert calls["loop_start_us"].notna().all()
    assert np.ptp(calls["loop_start_us"].to_numpy(dtype=float)) < 1e6
    start = calls["loop_start_us"] + calls["start_us"]
    end = calls["loop_start_us"] + calls["end_us"]
    for _, idx in calls.groupby(["run_id", "point", "call"]).groups.items():
        assert start[idx].max() <= end[idx].min(), (impl, start[idx].max(), end[idx].min())


def test_exchange_lateness_lines_up_the_two_ranks_of_an_exchange():
    """Times on the common clock: rank 0's loop started at 0, rank 1's at 100 (each
    span is stored relative to its own rank's start). Rank 0 ended its posts at 10, rank
    1 at 30: rank 0 waited 20 for it and finished 50 after both were in; rank 1 came 20
    late and finished 5 after."""

    def span(rank, kind, start, end, origin):
        return dict(run_id="r", point=0, inplace=0, call=0, step=0, rank=rank, kind=kind,
                    start_us=start - origin, end_us=end - origin, loop_start_us=origin)  # fmt: skip

    spans = pd.DataFrame([
        span(0, "post", 2, 10, 0.0), span(0, "wait", 10, 80, 0.0),
        span(1, "post", 25, 30, 100.0), span(1, "wait", 30, 35, 100.0),
    ])  # fmt: skip
    got = exchange_lateness(spans, [1]).set_index("rank")
    assert got.loc[0, "partner"] == 1 and got.loc[1, "partner"] == 0
    np.testing.assert_allclose(got["post_us"], [8, 5])
    np.testing.assert_allclose(got["late_us"], [20, -20])
    np.testing.assert_allclose(got["after_both_us"], [50, 5])
    np.testing.assert_allclose(got["direction_us"], [50, 25])  # from the partner's posts
    np.testing.assert_allclose(got["step_us"], [78, 10])
    with pytest.raises(ValueError, match="loop_start_us"):
        exchange_lateness(spans.assign(loop_start_us=None), [1])
    # waits chunk by chunk (NVRAR): the step ends with its last
    chunked = pd.concat([spans, pd.DataFrame([span(0, "wait", 80, 90, 0.0)])])
    got = exchange_lateness(chunked, [1]).set_index("rank")
    np.testing.assert_allclose(got["after_both_us"], [60, 5])
    np.testing.assert_allclose(got["direction_us"], [60, 25])
    np.testing.assert_allclose(got["step_us"], [88, 10])
    table = direction_table(chunked.assign(impl="nvrar", size_bytes=4096), [1])
    assert table.to_dict("records") == [
        dict(impl="nvrar", size_bytes=4096, directions=2, direction_min_us=25.0,
             direction_median_us=42.5, direction_p75_us=51.25, direction_max_us=60.0)
    ]  # fmt: skip


def test_exchange_lateness_of_a_recorded_butterfly(latency):
    """Recursive doubling on 8 ranks (partners r^1, r^2, r^4): one row per rank, call and
    step, each pair seen from both sides with opposite lateness."""
    _, spans, _ = latency
    got = exchange_lateness(spans[spans["impl"] == "recursive-doubling"], [1, 2, 4])
    assert len(got) == 8 * 3 * 3
    assert ((got["post_us"] >= 0) & (got["step_us"] >= got["post_us"])).all()
    pairs = got.merge(got, left_on=["call", "step", "rank"], right_on=["call", "step", "partner"])
    assert (pairs["partner_x"] == pairs["rank_y"]).all()
    np.testing.assert_allclose(pairs["late_us_x"], -pairs["late_us_y"])


def test_lateness_table_sums_a_recorded_butterfly_per_point(latency, driver_runs, capsys):
    """One row per point with the record's time; the CLI prints it, and says in one line
    what is wrong with a file without timeline steps."""
    from commbench.benchmarks import lateness

    points, spans, _ = latency
    mine = points[points["impl"] == "recursive-doubling"]
    table = lateness_table(mine, spans[spans["impl"] == "recursive-doubling"], [1, 2, 4])
    assert len(table) == len(mine) == 1
    row = table.iloc[0]
    assert row["time_us"] == pytest.approx(float(mine.iloc[0]["time_us"]))
    assert 0 <= row["post_us"] <= row["step_us"] and row["late_us"] > 0
    path = driver_runs.tmp / "timeline" / "latency.jsonl"
    assert lateness.main([str(path), "--distances", "1,2,4"]) == 0
    out = capsys.readouterr().out
    assert "recursive-doubling" in out and "direction_median_us" in out
    directions = direction_table(spans[spans["impl"] == "recursive-doubling"], [1, 2, 4])
    row = directions.iloc[0]
    assert len(directions) == 1 and row["directions"] == 8 * 3 * 3
    # a message can land before its sender, preempted on a shared core, marks its posts'
    # end, so the least direction may be below 0; the median is a message's time
    assert row["direction_min_us"] <= row["direction_median_us"] <= row["direction_max_us"]
    assert row["direction_median_us"] > 0
    with pytest.raises(SystemExit) as stop:
        lateness.main([str(path), "--distances", "0,2"])
    assert stop.value.code == 2 and "at least 1" in capsys.readouterr().err


def test_wait_stalls_find_the_rank_that_waited_far_longer_than_the_others(
    latency, driver_runs, capsys
):
    """Two calls of two steps on 4 ranks (2 a node): every wait 10 ms but rank 2's in
    call 1, step 0 (40 ms, two spans): one stall of 30 ms on node 1."""
    rows = []
    for call in (0, 1):
        for step in (0, 1):
            for rank in range(4):
                long = (call, step, rank) == (1, 0, 2)
                spans = [(0, 20e3), (20e3, 40e3)] if long else [(0, 10e3)]
                rows += [dict(run_id="r", point=0, impl="fast", size_bytes=1 << 20,
                              gpus_per_node=2, call=call, step=step, rank=rank, kind="wait",
                              start_us=a, end_us=b) for a, b in spans]  # fmt: skip
    for call in (0, 1):
        rows += [dict(run_id="r", point=0, impl="fast", size_bytes=1 << 20, gpus_per_node=2,
                      call=call, step=-1, rank=r, kind="call", start_us=0, end_us=50e3)
                 for r in range(4)]  # fmt: skip
    spans = pd.DataFrame(rows)
    got = wait_stalls(spans, 15e3)
    assert got[["call", "step", "rank", "node"]].values.tolist() == [[1, 0, 2, 1]]
    assert got["excess_us"].tolist() == [30e3]
    assert wait_stalls(spans, 30e3).empty  # more than the threshold, not as much
    row = stall_table(spans, 15e3).iloc[0]
    assert (row["calls"], row["stalled_calls"], row["stalls"], row["by_node"]) == (2, 1, 1, "1:1")
    assert row["by_rank"] == "2:1"
    from commbench.benchmarks import stalls

    path = driver_runs.tmp / "timeline" / "latency.jsonl"  # a recorded butterfly
    assert stalls.main([str(path), "--over-ms", "1000"]) == 0
    assert "recursive-doubling" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        stalls.main([str(path), "--over-ms", "0"])
    assert stop.value.code == 2 and "positive" in capsys.readouterr().err


def test_pipelined_calls_are_stamped_back_to_back(driver_runs):
    driver_runs.stdout("timeline/pipelined")
    points, _ = load_all(driver_runs.tmp / "timeline" / "pipelined.jsonl")
    spans = load_timeline(points)
    calls = spans[spans["kind"] == "call"]
    assert len(calls) == 8 * 3
    per_rank = (calls["end_us"] - calls["start_us"]).groupby(calls["rank"]).sum()
    loop = np.asarray(points.iloc[0]["rank_time_us"]) * 3  # each rank's timed loop
    assert (per_rank.to_numpy() <= loop * 1.001).all()
    assert per_rank.sum() >= 0.8 * loop.sum()  # what is missing: the loop's clock ticks
    inner = spans[spans["kind"] != "call"]
    assert set(inner["kind"]) == {"post", "wait"}


def test_report_draws_the_timeline(latency, driver_runs, tmp_path):
    points, spans, _ = latency
    table = timeline_breakdown(spans)
    ring = table[(table["impl"] == "ring") & (table["size_bytes"] == 1024)]
    shares = ring.set_index("kind")["share"]
    assert shares["call"] == 1.0 and shares["wait"] > 0 and shares["other"] < UNCOVERED
    fig = figure_8(points, tmp_path)
    assert empty_message(fig) is None
    assert (tmp_path / "fig8_timeline.png").stat().st_size > 0
    page = write_report([driver_runs.tmp / "timeline"], tmp_path / "report.html").read_text()
    assert "Where the time goes (--timeline)" in page
    assert page.count("data:image/png;base64,") == 8
    assert "<td>nvrar</td>" in page and "collective (µs)" in page


def test_traced_points_are_drawn_only_in_figure_8(latency):
    """A traced point's calls pay the spans' recording: figures 1-7 compare times
    without it, figure 8 draws it."""
    points, _, _ = latency
    plain = points.assign(timeline_file=None)
    assert untraced(points).empty and len(untraced(pd.concat([points, plain]))) == len(plain)

    def drawn(pts: pd.DataFrame) -> set[int]:
        return {r.spec.number for r in render_all(pts, pd.DataFrame()) if r.empty is None}

    assert drawn(points) == {8} and {5, 6} <= drawn(plain) and 8 not in drawn(plain)


def test_launches_of_one_run_id_keep_their_own_raw_samples_and_spans(tmp_path):
    """A job or a sweep gives its launches one run id and each launch numbers its points
    from 0: a record finds its raw line and spans by its launch, not another's."""
    out = tmp_path / "r.jsonl"
    for impl, calls in (("ring", "3"), ("recursive-doubling", "4")):
        proc = run_mpi(2, ["-m", "commbench", "run", "allreduce", "--impl", impl, "-b", "1K",
                           "-e", "1K", "-n", calls, "-w", "1", "--timing", "latency",
                           "--timeline", "--out", str(out)],
                       env={"COMMBENCH_RUN_ID": "job-1"}, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
    points, _ = load_all(out)
    assert set(points["run_id"]) == {"job-1"} and points["launch_id"].nunique() == 2
    assert [len(s[0]) for s in load_raw_samples(points)] == [3, 4]  # ranks x calls
    steps = load_timeline(points).groupby("impl")["step"].max()
    assert steps.to_dict() == {"recursive-doubling": 0, "ring": 1}  # 1 and 2(P - 1) steps


def test_recorder_tiles_a_call_and_is_off_by_default():
    assert timeline.active() is None
    clock = iter([1.0, 1.5, 2.0, 2.25]).__next__
    rec = timeline.Recorder(clock)
    rec.origin = 0.5
    with timeline.recording(rec):
        assert timeline.active() is rec
        rec.begin(0, clock())
        rec.mark("post", 0)
        rec.mark("wait", 0)
        rec.end(clock())
    assert timeline.active() is None
    assert rec.rows() == [
        (0, 0, "post", 500000.0, 1000000.0),
        (0, 0, "wait", 1000000.0, 1500000.0),
        (0, -1, "call", 500000.0, 1750000.0),
    ]


def test_a_failed_record_write_leaves_no_timeline_lines(tmp_path, monkeypatch):
    writer = RecordWriter(tmp_path / "r.jsonl")
    writer.write({"a": 1}, {"run_id": "x"}, [{"call": 0}, {"call": 1}])
    assert len(writer.timeline_path.read_text().splitlines()) == 2
    real = RecordWriter._append

    def fail_on_records(self, path, obj):
        if path == self.path:
            raise OSError(28, "no space left")
        real(self, path, obj)

    monkeypatch.setattr(RecordWriter, "_append", fail_on_records)
    with pytest.raises(OSError):
        writer.write({"a": 2}, {"run_id": "y"}, [{"call": 0}])
    assert len(writer.timeline_path.read_text().splitlines()) == 2
    assert len(writer.raw_path.read_text().splitlines()) == 1
    assert pd.read_json(writer.timeline_path, lines=True)["call"].tolist() == [0, 1]


def test_rank_step_ends_line_the_ranks_up_by_their_loop_start():
    """Rank 1's loop started 10 us after rank 0's: its step ends count from rank 0's
    first span, the call's first on any rank."""
    rows = [dict(run_id="r", point=0, impl="spreadout", size_bytes=8, call=0, rank=rank,
                 step=step, kind="wait", start_us=a, end_us=b, loop_start_us=start)
            for rank, start, spans in ((0, 1000.0, ((0, 0, 50), (1, 50, 80))),
                                       (1, 1010.0, ((0, 0, 30), (1, 30, 100))))
            for step, a, b in spans]  # fmt: skip
    got = rank_step_ends(pd.DataFrame(rows))
    assert got[["rank", "step", "end_us"]].values.tolist() == [
        [0, 0, 50.0], [0, 1, 80.0], [1, 0, 40.0], [1, 1, 110.0]]  # fmt: skip
    rows[0]["loop_start_us"] = None
    with pytest.raises(ValueError, match="loop_start_us"):
        rank_step_ends(pd.DataFrame(rows))


def test_step_ends_prints_each_ranks_steps_beside_the_model(latency, driver_runs, capsys):
    """A recorded spread-out (8 ranks, 7 steps): every rank leaves its steps in order,
    and the report has a measured and a modelled row per rank."""
    _, spans, _ = latency
    ends = rank_step_ends(spans[spans["impl"] == "spreadout"])
    assert set(ends["step"]) == set(range(7))
    for _, part in ends.groupby(["run_id", "point", "call", "rank"]):
        assert part.sort_values("step")["end_us"].is_monotonic_increasing
    from commbench.benchmarks import step_ends

    path = driver_runs.tmp / "timeline" / "latency.jsonl"
    assert step_ends.main([str(path), "--system", "local"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# zipf:0.8 16384 B a rank, 2x4, call ")
    assert sum(line.split()[0] == "model" for line in out) == 8
    assert all(len(line.split()) == 8 for line in out[2:])  # a label and 7 steps
    with pytest.raises(SystemExit) as stop:
        step_ends.main([str(path), "--call", "9"])
    assert stop.value.code == 2 and "no call 9" in capsys.readouterr().err
