"""All-gather, reduce-scatter and broadcast in the figures, tables and report: figures 5
and 6 get their panels, in-place records their own lines, the agreement table pairs in
place with in place."""

from __future__ import annotations

import json

from commbench.analysis.figures import figure_5, figure_6
from commbench.analysis.load import load_reference, normalise_points
from commbench.analysis.report import write_report
from commbench.analysis.tables import agreement_table, with_series
from tests.test_analysis_data import MiB, make_record


def block_records() -> list[dict]:
    out = []
    for system, nodes_list in (("perlmutter", (1, 2, 4)), ("vista", (2,))):
        for coll, impls in (("allgather", ("ring", "nccl")), ("broadcast", ("tree", "nccl"))):
            for nodes in nodes_list:
                for impl in impls:
                    for inplace in (0, 1):
                        rec = make_record(collective=coll, impl=impl, size_bytes=4 * MiB,
                                          time_us=300.0 * nodes + 20 * inplace, system=system,
                                          nodes=nodes, dtype="float32")  # fmt: skip
                        rec["inplace"] = inplace
                        out.append(rec)
    return out


def test_in_place_records_are_their_own_series():
    df = with_series(normalise_points(block_records()))
    assert {"ring", "ring in place", "nccl", "nccl in place"} <= set(df.series)
    old = with_series(normalise_points([make_record()]))  # records from before --inplace
    assert list(old.series) == ["mpi"]


def test_figures_5_and_6_show_the_new_collectives(tmp_path):
    points = normalise_points(block_records())
    fig5 = figure_5(points, tmp_path)
    titles = " | ".join(ax.get_title() for ax in fig5.axes)
    assert "allgather" in titles and "broadcast" in titles
    labels = {t.get_text() for ax in fig5.axes if ax.get_legend() for t in ax.get_legend().texts}
    assert {"ring (measured)", "ring in place (measured)", "tree in place (measured)"} <= labels
    fig6 = figure_6(points, tmp_path, reference=load_reference())
    heads = " | ".join(ax.get_title() for ax in fig6.axes)
    assert "allgather" in heads and "broadcast" in heads


def test_agreement_pairs_in_place_with_in_place():
    recs = []
    for impl in ("nccl", "nccl-tests:all_gather"):
        for inplace, t in ((0, 100.0), (1, 140.0)):
            rec = make_record(collective="allgather", impl=impl, time_us=t, jitter=0.0)
            rec.update(inplace=inplace, run_id="R")
            recs.append(rec)
    table = agreement_table(normalise_points(recs))
    assert sorted(table.inplace) == [0, 1] and list(table.ratio) == [1.0, 1.0]


def test_report_lists_the_new_collectives(tmp_path):
    out = tmp_path / "results.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in block_records()))
    page = write_report([tmp_path], tmp_path / "report.html").read_text()
    assert "allgather" in page and "broadcast" in page and "ring in place" in page
