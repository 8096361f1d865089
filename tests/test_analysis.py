"""Analysis package: loading, summaries, figures 1-7, reference data, report and CLIs."""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from commbench.analysis.figures import (
    FIGURES,
    empty_message,
    figure_1,
    figure_3,
    figure_6,
    render_all,
)
from commbench.analysis.load import (
    POINT_COLUMNS,
    load_all,
    load_reference,
    normalise_points,
    normalise_schedules,
    read_records,
    run_metadata,
    workload_key,
    zipf_exponent,
)
from commbench.analysis.report import figure_data_uri, write_report
from commbench.analysis.style import MAX_TICKS, binary_label, power_of_two_ticks
from commbench.analysis.tables import (
    best_table,
    line_rate_table,
    line_rates,
    model_error_table,
    speedup,
    speedup_table,
    summarise,
    with_series,
)
from commbench.cli import main as commbench
from commbench.cli import main as commbench_main
from tests.test_analysis_data import (
    KiB,
    MiB,
    allreduce_records,
    make_record,
    schedule_records,
    synthetic_results,
    write_jsonl,
)

# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return synthetic_results(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def loaded(results_dir):
    return load_all(results_dir)


@pytest.fixture(scope="module")
def reference():
    return load_reference()


@pytest.fixture(scope="module")
def rendered(loaded, reference, tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    points, schedules = loaded
    return out, {r.spec.number: r for r in render_all(points, schedules, out, reference=reference)}


@pytest.fixture()
def small_dir(tmp_path):
    """A small result tree (fast to render): one allreduce system and schedules."""
    write_jsonl(tmp_path / "res" / "a.jsonl", allreduce_records(reps=1))
    write_jsonl(tmp_path / "res" / "sched.jsonl", schedule_records()[:6])
    return tmp_path / "res"


def _legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def _titles(fig) -> str:
    parts = [ax.get_title() for ax in fig.axes]
    if fig._suptitle is not None:
        parts.append(fig._suptitle.get_text())
    return "\n".join(parts)


# ------------------------------------------------------------------ loading


def test_load_reads_files_and_directories_and_skips_raw_side_files(results_dir, tmp_path):
    (results_dir / "perlmutter" / "run1" / "allreduce.raw.jsonl").write_text(
        json.dumps({"run_id": "x", "point": 0, "samples_us": [1.0]}) + "\n"
    )
    points, schedules = load_all(results_dir)
    assert len(points) == 186 and len(schedules) == 30
    assert set(points["kind"]) == {"measured", "modelled"}
    assert set(POINT_COLUMNS) <= set(points.columns)
    one = results_dir / "vista" / "allreduce.jsonl"
    both, _ = load_all(one, results_dir / "mi300x")
    assert len(both) == 24 + 50
    assert both["source_line"].min() == 1 and both["source_file"].str.endswith(".jsonl").all()
    with pytest.raises(ValueError, match="is a side file"):
        load_all(results_dir / "perlmutter" / "run1" / "allreduce.raw.jsonl")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"collective": "allreduce", "impl": "mpi"', "not valid JSON"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        ('{"collective": "allreduce", "size_bytes": 8, "time_us_avg": 1}', "lacks impl"),
        ('{"collective": "allreduce", "impl": "mpi", "size_bytes": 8}', "none of time_us_min"),
        (
            '{"collective": "allreduce", "impl": "m", "size_bytes": "8K", "time_us_avg": 1}',
            "size_bytes must be a number",
        ),
        ('{"collective": "schedule", "gpus": 16, "servers": 2}', "schedule record lacks strategy"),
    ],
)
def test_malformed_line_is_reported_with_file_and_line(tmp_path, line, why):
    good = json.dumps(make_record())
    path = write_jsonl(tmp_path / "r.jsonl", [])
    path.write_text(f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(ValueError) as err:
        load_all(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{path}:3: ") and why in message
    assert "\n" not in message


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such result file or directory"):
        load_all(tmp_path / "nope")
    points, schedules = load_all(tmp_path)
    assert points.empty and schedules.empty
    assert {"kind", "time_us", "workload_key"} <= set(points.columns)
    assert {"gpus", "synthesis_us", "strategy"} <= set(schedules.columns)


def test_time_us_is_read_or_chosen_by_time_reduction():
    base = make_record()
    rows = []
    for how, key in (
        ("min", "time_reduction"),
        ("max", "time_reduce"),
        ("rank0", "time_reduction"),
    ):
        rec = {k: v for k, v in base.items() if k not in ("time_us", "time_reduction")}
        rec[key] = how
        rows.append(rec)
    rows.append(dict(base, time_us=123.0))
    df = normalise_points(rows)
    assert df["time_us"].tolist() == [
        base["time_us_min"],
        base["time_us_max"],
        base["rank_time_us"][0],
        123.0,
    ]


def test_nodes_are_derived_when_missing():
    rec = make_record(nodes=2, gpus_per_node=4)
    del rec["nodes"]
    df = normalise_points([rec])
    assert int(df["nodes"].iloc[0]) == 2 and int(df["nranks"].iloc[0]) == 8


def test_workload_key_and_zipf_exponent():
    assert workload_key("zipf:0.5@3") == "zipf:0.5"
    assert workload_key(None) == "" and workload_key(float("nan")) == ""
    assert zipf_exponent("zipf:0.5") == 0.5 and zipf_exponent("zipf") == 0.8
    assert math.isnan(zipf_exponent("uniform")) and math.isnan(zipf_exponent("zipfx"))


def test_read_records_keeps_unknown_fields(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [dict(make_record(), harness_overhead_us=0.3)])
    assert read_records(path)[0]["harness_overhead_us"] == 0.3


# ------------------------------------------------------------------ labels and axes


@pytest.mark.parametrize(
    ("nbytes", "label"),
    [(8, "8 B"), (1023, "1023 B"), (1024, "1 KiB"), (65536, "64 KiB"), (1536, "1.5 KiB"),
     (2 * MiB, "2 MiB"), (16 << 30, "16 GiB")],
)  # fmt: skip
def test_binary_label(nbytes, label):
    assert binary_label(nbytes) == label


@given(st.integers(min_value=1, max_value=1 << 44))
def test_binary_label_round_trips_within_rounding(n):
    number, unit = binary_label(n).split(" ")
    scale = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": 1 << 30}[unit]
    assert abs(float(number) * scale - n) <= 0.005 * n + 0.5


@given(st.floats(1, 2.0**40), st.floats(1, 2.0**40))
@example(2.0**40, 2.0**40 - 0.002)
@example(64.0, 64.0)
def test_power_of_two_ticks_cover_the_range(a, b):
    lo, hi = min(a, b), max(a, b)
    ticks = power_of_two_ticks(lo, hi)
    assert 1 <= len(ticks) <= MAX_TICKS
    assert all(math.log2(t).is_integer() for t in ticks)
    assert ticks[0] <= lo and ticks == sorted(ticks)
    step = ticks[1] / ticks[0] if len(ticks) > 1 else 2
    assert ticks[-1] * step >= hi


# ------------------------------------------------------------------ summaries


def _points(records):
    return normalise_points(records)


def test_summarise_median_and_spread_over_repetitions_and_ranks():
    recs = []
    for t, lo, hi in ((10.0, 8.0, 12.0), (20.0, 18.0, 25.0), (30.0, 28.0, 31.0)):
        rec = make_record(size_bytes=1_000_000, time_us=t)
        rec.update(time_us=t, time_us_min=lo, time_us_max=hi, metric_bytes=1_000_000)
        rec.update(algbw_GBps=1_000_000 / (t * 1e3), busbw_factor=1.5)
        rec["busbw_GBps"] = rec["algbw_GBps"] * 1.5
        recs.append(rec)
    df = _points(recs)
    t = summarise(df, ["impl"], "time").iloc[0]
    assert (t["value"], t["low"], t["high"], t["n"]) == (20.0, 8.0, 31.0, 3)
    lat = summarise(df, ["impl"], "latency_max").iloc[0]
    assert (lat["value"], lat["low"], lat["high"]) == (25.0, 8.0, 31.0)
    bw = summarise(df, ["impl"], "algbw").iloc[0]
    assert bw["value"] == pytest.approx(50.0)
    assert bw["low"] == pytest.approx(1e6 / 31e3) and bw["high"] == pytest.approx(1e6 / 8e3)
    bus = summarise(df, ["impl"], "busbw").iloc[0]
    assert bus["value"] == pytest.approx(75.0) and bus["high"] == pytest.approx(1.5e6 / 8e3)
    # the FAST paper's all-to-allv algbw: mean bytes per GPU (the size), not the busiest rank's
    df["metric_bytes"] = 3_000_000
    mean = summarise(df, ["impl"], "mean_algbw").iloc[0]
    assert mean["value"] == pytest.approx(50.0) and mean["low"] == pytest.approx(1e6 / 31e3)
    with pytest.raises(ValueError, match="unknown metric"):
        summarise(df, ["impl"], "speed")


def test_speedup_value_and_spread_by_hand():
    base = pd.DataFrame({"time_us": [20.0, 24.0], "rank_time_us": [[20.0, 30.0], [24.0, 24.0]]})
    cand = pd.DataFrame({"time_us": [10.0], "rank_time_us": [[10.0, 10.0]]})
    value, low, high = speedup(base, cand)
    assert value == pytest.approx(2.2)  # median 22 / 10
    assert low == pytest.approx(2.0) and high == pytest.approx(3.0)
    assert all(math.isnan(x) for x in speedup(base, cand.iloc[0:0]))


def test_best_and_speedup_tables_pick_the_right_rows():
    recs = []
    for impl, t in (("nvrar", 50.0), ("nccl", 150.0), ("mpi", 100.0)):
        recs.append(make_record(impl=impl, time_us=t, jitter=0.0))
    df = _points(recs)
    best = best_table(df)
    assert len(best) == 1
    row = best.iloc[0]
    assert (row["best"], row["runner_up"]) == ("nvrar", "mpi")
    assert row["lead"] == pytest.approx(2.0)
    sp = speedup_table(df).set_index("impl")
    assert set(sp["baseline"]) == {"nccl"}
    assert sp.loc["nvrar", "speedup"] == pytest.approx(3.0)
    assert sp.loc["mpi", "speedup"] == pytest.approx(1.5)
    no_nccl = speedup_table(_points(recs[::2])).set_index("impl")
    assert no_nccl.loc["nvrar", "baseline"] == "mpi"


def test_series_split_only_by_params_that_vary():
    a = make_record(impl="fast", params={"strategy": "plain", "unit": 4})
    b = make_record(impl="fast", params={"strategy": "bottleneck", "unit": 4})
    c = make_record(impl="mpi", params={"x": 1})
    series = with_series(_points([a, b, c]))["series"].tolist()
    assert series == ["fast (strategy=plain)", "fast (strategy=bottleneck)", "mpi"]


def test_line_rates_and_fraction_of_line_rate(reference):
    rates = line_rates(reference, {"local": 10.0})
    assert rates["perlmutter"] == 25.0 and rates["h200"] == 50.0 and rates["local"] == 10.0
    with pytest.raises(ValueError, match="positive number"):
        line_rates(reference, {"x": 0})
    df = _points(allreduce_records(reps=1))
    table = line_rate_table(df, rates)
    row = table.iloc[0]
    assert row["size_bytes"] == 2 * MiB and row["best"] == "nvrar"
    assert row["fraction"] == pytest.approx(row["busbw_GBps"] / 25.0)


def test_model_error_table():
    meas = make_record(impl="ring", time_us=200.0, jitter=0.0)
    model = make_record(impl="ring", time_us=150.0, modelled=True)
    table = model_error_table(_points([meas, model]))
    assert len(table) == 1 and table["ratio"].iloc[0] == pytest.approx(0.75)
    assert model_error_table(_points([meas])).empty


# ------------------------------------------------------------------ reference data


def test_reference_data_has_sources_and_the_papers_numbers(reference):
    assert not reference.empty and reference["source"].str.len().min() > 5
    synth = reference[reference["quantity"] == "synthesis_us"].set_index(["impl", "gpus", "value"])
    assert (("fast", 64, 221.0) in synth.index) and (("fast", 320, 77000.0) in synth.index)
    assert ("syccl", 16, 3.6e6) in synth.index
    lat = reference[(reference["quantity"] == "latency_us") & (reference["impl"] == "nvrar")]
    assert dict(zip(lat["size_min"], lat["value"], strict=True)) == {
        8 * KiB: 62,
        64 * KiB: 72,
        128 * KiB: 77,
        256 * KiB: 82,
        512 * KiB: 105,
        MiB: 158,
    }
    band = reference[(reference["quantity"] == "speedup") & (reference["impl"] == "nvrar")]
    assert (band["low"].iloc[0], band["high"].iloc[0]) == (1.9, 3.6)
    fast = reference[
        (reference["quantity"] == "algbw_GBps") & (reference["workload"] == "zipf:0.8")
    ]
    assert set(fast["impl"]) == {"fast", "fanout", "spreadout"}


def test_reference_without_source_is_refused(tmp_path):
    header = "source,figure,system,fabric,quantity,impl,baseline,collective,workload,dtype,nodes,gpus,size_min,size_max,value,low,high,unit,note"
    (tmp_path / "bad.csv").write_text(f"{header}\n,1,x,,latency_us,,,,,,,,,,1,,,us,\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: reference row without a source"):
        load_reference(tmp_path)
    assert load_reference(tmp_path / "absent").empty


# ------------------------------------------------------------------ figures


def test_every_figure_draws_and_saves_png_and_svg(rendered):
    out, figs = rendered
    assert sorted(figs) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert "--timeline" in figs[8].empty  # these records have none (tests/test_timeline.py)
    for number, r in figs.items():
        if number == 8:
            continue
        assert r.empty is None, f"figure {number}: {r.empty}"
        png, svg = (out / f"{r.spec.name}.png"), (out / f"{r.spec.name}.svg")
        assert r.paths == [png, svg]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in svg.read_bytes()[:400]


def test_figure_1_conventions(rendered):
    fig = rendered[1][1].figure
    titles = _titles(fig)
    for needle in (
        "perlmutter",
        "4 nodes × 4 GPUs",
        "vista",
        "2 nodes × 1 GPU",
        "measured",
        "modelled",
    ):
        assert needle in titles
    latency = fig.axes[0]
    assert latency.get_xscale() == "log" and latency.xaxis.get_transform().base == 2
    labels = [t.get_text() for t in latency.get_xticklabels()]
    assert "64 KiB" in labels and "2 MiB" in labels
    legends = _legend_texts(fig)
    assert "nvrar (measured)" in legends and "nccl (modelled)" in legends
    papers = [t for t in legends if "Singhania" in t]
    assert papers and all(t.startswith("paper: ") for t in papers)
    assert any("1.9–3.6×" in t for t in papers)
    assert any(ax.collections for ax in fig.axes)  # the min-max bands


def test_reference_numbers_are_never_labelled_as_ours(rendered):
    for r in rendered[1].values():
        for text in _legend_texts(r.figure):
            if re.search(r"\[(Lei|Singhania|spec)", text):
                assert text.startswith(("paper: ", "reference: ")), text
            else:
                assert text.startswith("paper") is False


def test_figure_2_and_4_overlay_the_papers_numbers(rendered):
    skew = _legend_texts(rendered[1][2].figure)
    assert any(t.startswith("paper: fast 10–12.5 GB/s") for t in skew)
    sched = rendered[1][4].figure
    texts = _legend_texts(sched)
    assert any("221 µs @ 64 GPUs" in t for t in texts) and any("77 ms" in t for t in texts)
    assert any("syccl 3.6 s @ 16 GPUs" in t for t in texts)
    assert "synthesis measured" in _titles(sched)


def test_figure_3_uses_finish_times_and_falls_back_to_rank_times():
    recs = [
        make_record(collective="alltoallv", impl=i, workload="zipf:0.8", finish=True,
                    rank_skew=s, size_bytes=MiB, time_us=t, nodes=2, gpus_per_node=4)
        for i, s, t in (("fast", 0.0, 100.0), ("fanout", 1.0, 150.0))
    ]  # fmt: skip
    fig = figure_3(_points(recs))
    assert empty_message(fig) is None
    assert "finish time" in fig.axes[0].get_ylabel()
    assert "workload zipf:0.8" in _titles(fig) and "1 MiB per GPU" in _titles(fig)
    for rec in recs:
        rec["rank_finish_us"] = None
    fig = figure_3(_points(recs))
    assert "mean call time" in fig.axes[0].get_ylabel()
    assert "no finish times" in fig.axes[0].get_title()


def test_figure_6_keeps_systems_without_a_line_rate_in_raw_units():
    recs = allreduce_records(system="local", nodes=2, gpn=2, reps=1)
    fig = figure_6(_points(recs), reference=load_reference())
    assert any("no line rate known for local" in ax.get_title() for ax in fig.axes)
    fig = figure_6(_points(recs), reference=load_reference(), rates={"local": 10.0})
    assert not any("no line rate known" in ax.get_title() for ax in fig.axes)


@pytest.mark.parametrize("spec", FIGURES, ids=lambda s: s.name)
def test_every_figure_says_what_is_missing_on_an_empty_selection(spec, tmp_path, reference):
    points, schedules = normalise_points([]), normalise_schedules([])
    data = schedules if spec.input == "schedules" else points
    kwargs = {"reference": reference} if "reference" in spec.options else {}
    fig = spec.function(data, tmp_path, **kwargs)
    message = empty_message(fig)
    assert message and ("Run" in message or "run" in message)
    assert (tmp_path / f"{spec.name}.png").exists() and (tmp_path / f"{spec.name}.svg").exists()


def test_figures_with_unrelated_records_only_are_empty_not_broken():
    only_alltoallv = _points(
        [make_record(collective="alltoallv", impl="fanout", workload="uniform")]
    )
    assert "No allreduce results" in empty_message(figure_1(only_alltoallv))
    assert "No skewed all-to-allv" in empty_message(figure_3(only_alltoallv))


# ------------------------------------------------------------------ report and CLIs


def test_html_report_is_self_contained(small_dir, tmp_path):
    out = write_report([small_dir], tmp_path / "r" / "report.html")
    page = out.read_text()
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == 8
    assert base64.b64decode(uris[0])[:4] == b"\x89PNG"
    assert not re.search(r'(src|href)="(https?:)?//', page)
    for heading in ("Best implementation per size and system", "Speed-ups over the baseline",
                    "Fraction of NIC line rate", "The papers&#39; numbers"):  # fmt: skip
        assert heading in page
    assert re.search(
        r"<td>nvrar</td>\s*<td>nccl</td>\s*<td>\d\.\d\d× \(\d\.\d\d–\d\.\d\d\)</td>", page
    )


def test_markdown_report_with_svg_figures(small_dir, tmp_path):
    md = write_report([small_dir], tmp_path / "report.md", image_format="svg")
    text = md.read_text()
    assert "| kind | system |" in text
    assert "![Figure 1](report_files/fig1_allreduce_latency.svg)" in text
    assert b"<svg" in (tmp_path / "report_files" / "fig7_model_predictions.svg").read_bytes()[:400]


def test_svg_data_uri():
    fig = figure_1(normalise_points([]))
    uri = figure_data_uri(fig, "svg")
    assert uri.startswith("data:image/svg+xml;base64,")
    assert b"<svg" in base64.b64decode(uri.split(",", 1)[1])[:400]


def test_report_on_no_results_still_writes_a_page(tmp_path):
    (tmp_path / "empty").mkdir()
    page = write_report([tmp_path / "empty"], tmp_path / "r.html").read_text()
    assert "No result records found" in page and page.count("data:image/png") == 8


def test_commbench_report_cli(small_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert commbench(["report", str(small_dir), "-o", str(out)]) == 0
    assert out.exists() and f"report written to {out}" in capsys.readouterr().out
    bad = write_jsonl(tmp_path / "bad" / "b.jsonl", [make_record()])
    bad.write_text(bad.read_text() + "{oops\n")
    assert commbench(["report", str(bad.parent), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{bad}:2: not valid JSON" in err
    assert not (tmp_path / "x.html").exists()


def test_commbench_figures(small_dir, tmp_path, capsys):
    out = tmp_path / "figs"
    assert commbench_main(["figures", str(small_dir), "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and lines[0].startswith("figure 1: ")
    assert any(line.startswith("figure 2: nothing to draw") for line in lines)
    assert len(list(out.glob("*.png"))) == 8 and len(list(out.glob("*.svg"))) == 8
    assert commbench_main(["figures", str(small_dir), "--line-rate", "local", "-o", str(out)]) == 2
    assert "bad --line-rate 'local'" in capsys.readouterr().err
    assert commbench_main(["figures", str(tmp_path / "nope"), "-o", str(out)]) == 2


def test_spread_band_contains_the_line(loaded):
    points, _ = loaded
    s = summarise(points, ["system", "impl", "size_bytes", "kind"], "busbw")
    assert np.all(s["low"] <= s["value"] + 1e-12) and np.all(s["value"] <= s["high"] + 1e-12)


def test_fast_records_with_schedule_info_feed_figure_4(tmp_path):
    rec = make_record(collective="alltoallv", impl="fast", workload="zipf:0.8", modelled=True)
    rec["info"] = {"strategy": "bottleneck", "synthesis_us": 180.0, "stages": 9,
                   "lower_bound_bytes": 1024, "time_over_lb": 1.04}  # fmt: skip
    plain = make_record(collective="alltoallv", impl="fanout", workload="zipf:0.8")
    write_jsonl(tmp_path / "sim.jsonl", [rec, plain])
    points, schedules = load_all(tmp_path)
    assert len(points) == 2 and len(schedules) == 1
    row = schedules.iloc[0]
    assert (row["gpus"], row["servers"], row["strategy"], row["stages"]) == (16, 4, "bottleneck", 9)
    assert row["modelled_time_over_lb"] == 1.04 and row["source_line"] == 1


def test_run_metadata_reads_versions_and_job_sentinels(tmp_path):
    ok = write_jsonl(tmp_path / "perlmutter" / "r1" / "results.jsonl", allreduce_records(reps=1))
    (ok.parent / "ready").write_text("2026-01-01T00:00:00Z\n")
    bad = write_jsonl(
        tmp_path / "vista" / "r2" / "results.jsonl", allreduce_records("vista", 2, 1, reps=1)
    )
    (bad.parent / "error").write_text("exit status 1\nnvrar: exit status 2 (logs/nvrar.log)\n")
    from commbench.analysis.load import run_metadata

    runs = run_metadata(load_all(tmp_path)[0]).set_index("system")
    assert runs.loc["perlmutter", "job"] == "ready" and runs.loc["perlmutter", "records"] == 24
    assert runs.loc["vista", "job"] == "error: nvrar: exit status 2 (logs/nvrar.log)"
    assert runs.loc["vista", "versions"] == "python 3.11"
    page = write_report([tmp_path], tmp_path / "r.html").read_text()
    assert "error: nvrar: exit status 2" in page


def test_every_registered_implementation_has_its_own_colour():
    from commbench.analysis.style import impl_color
    from commbench.kernels.registry import implementations

    names = sorted({spec.name for spec in implementations()})
    colours = {name: impl_color(name) for name in names}
    assert len(set(colours.values())) == len(names), colours


def test_scorecard_opens_the_report_and_judges_each_claim(tmp_path):
    from commbench.analysis.scorecard import scorecard

    measured = allreduce_records(reps=1)
    modelled = [dict(r, run_id=measured[0]["run_id"]) for r in allreduce_records(modelled=True)]
    modelled += [dict(r, system="h200") for r in allreduce_records(modelled=True)]
    write_jsonl(tmp_path / "run" / "results.jsonl", measured + modelled)
    points, schedules = load_all(tmp_path / "run")
    card = scorecard(points, schedules, load_reference()).set_index("evidence")
    gpu = card.loc["measured on GPU (perlmutter, 4×4)"]
    # nvrar 60 + 0.05 s/KiB vs nccl 180 + 0.06 s/KiB: 2.83x at 128 KiB .. 1.87x at 2 MiB (+ jitter)
    assert gpu["claim"].startswith("NVRAR vs NCCL") and gpu["paper"] == "1.9–3.6×"
    assert gpu["ours"] == (
        "1.86–2.83× (5 points); compare: 5 cannot tell; 5 of 5 on one launch a side"
    )
    assert gpu["configuration"] == "defaults; vs NCCL only; 128 KiB–2 MiB"
    # one record per point and implementation, without per-iteration samples: no interval
    assert gpu["verdict"] == (
        "partly (4 of 5 points in the band); cannot tell at 95 % (no intervals)"
    )
    assert "modelled (perlmutter, 4×4)" in card.index and "modelled (h200, 4×4)" in card.index
    validation = card.loc["modelled (model validation, paper configurations)"]
    assert len(validation) >= 4 and set(validation["verdict"]) >= {"reproduced", "not reproduced"}
    # the Runs table: one row per (run, system, kind) of the mixed run
    runs = run_metadata(points)
    assert sorted(zip(runs["system"], runs["kind"], strict=True)) == [
        ("h200", "modelled"), ("perlmutter", "measured"), ("perlmutter", "modelled")
    ]  # fmt: skip
    text = write_report([tmp_path / "run"], tmp_path / "r.md").read_text()
    first = text.index("## Reproduction scorecard")
    assert first < text.index("<details><summary><b>Inputs</b>") < text.index("<b>Runs</b>")
    assert (
        "| NVRAR vs NCCL all-reduce, 128 KiB-2 MiB | defaults; vs NCCL only; 128 KiB–2 MiB "
        "| 1.9–3.6× | 1.86–2.83× (5 points); compare: 5 cannot tell; 5 of 5 on one launch a "
        "side |"
    ) in text


def test_overhead_table_shows_c_reference_and_host_bound_points(tmp_path):
    from commbench.analysis.load import load_results
    from commbench.analysis.tables import overhead_table

    with_ref = dict(make_record(time_us=12.0), reference_time_us=10.0, host_us=12.0,
                    timed_loop="native", timing_mode="latency")  # fmt: skip
    bound = dict(make_record(impl="ring", time_us=50.0), host_us=49.0, host_bound=True,
                 timed_loop="python", timing_mode="pipelined")  # fmt: skip
    plain = make_record(impl="rabenseifner")  # neither: not shown
    path = write_jsonl(tmp_path / "r.jsonl", [with_ref, bound, plain])
    table = overhead_table(load_results(path))
    assert list(table["impl"]) == ["mpi", "ring"]
    assert table["ratio"].iloc[0] == pytest.approx(with_ref["time_us"] / 10.0)
    assert math.isnan(table["ratio"].iloc[1]) and table["host_bound"].iloc[1] is True
