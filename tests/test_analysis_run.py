"""Figures and report from a short real run of the suite (4 ranks as 2 nodes x 2 GPUs)."""

from __future__ import annotations

import pytest

from commbench.analysis.figures import FIGURES, empty_message
from commbench.analysis.load import load_all, load_reference
from commbench.analysis.report import write_report

RUNS = [
    ("allreduce", "mpi", ["-d", "bf16", "-b", "64K", "-e", "256K"]),
    ("allreduce", "nvrar", ["-d", "bf16", "-b", "64K", "-e", "256K"]),
    ("alltoallv", "fanout", ["-b", "4K", "-e", "16K", "-f", "4", "--workload", "zipf:0.5,0.8"]),
    ("alltoallv", "mpi", ["-b", "4K", "-e", "16K", "-f", "4", "--workload", "zipf:0.5,0.8"]),
]


#: The four runs (label -> (ranks, ARGS)), one ``commbench run`` each, into one records
#: file, in one 4-rank job (the ``driver_runs`` fixture).
DRIVER_RUNS = {
    f"real/{collective}/{impl}": (4, [
        collective, "--impl", impl, "--gpus-per-node", "2", *flags, "-n", "3", "-w", "1",
        "-c", "1", "--out", "{tmp}/real/results.jsonl"])
    for collective, impl, flags in RUNS
}  # fmt: skip


@pytest.fixture(scope="module")
def real_results(driver_runs):
    for label in DRIVER_RUNS:
        driver_runs.stdout(label)
    return driver_runs.tmp / "real"


def test_real_results_load(real_results):
    points, schedules = load_all(real_results)
    assert len(points) == 3 + 3 + 4 + 4 and schedules.empty
    assert set(points["system"]) == {"local"} and set(points["kind"]) == {"measured"}
    assert set(points["nodes"]) == {2} and set(points["gpus_per_node"]) == {2}
    assert points["time_us"].gt(0).all() and points["nwrong"].eq(0).all()
    assert set(points["zipf_s"].dropna()) == {0.5, 0.8}


@pytest.mark.parametrize("spec", FIGURES, ids=lambda s: s.name)
def test_every_figure_from_a_real_run(real_results, spec, tmp_path):
    points, schedules = load_all(real_results)
    data = schedules if spec.input == "schedules" else points
    kwargs = {"reference": load_reference()} if "reference" in spec.options else {}
    fig = spec.function(data, tmp_path, **kwargs)
    assert (tmp_path / f"{spec.name}.png").stat().st_size > 0
    message = empty_message(fig)
    if spec.number in (1, 2, 3, 5, 6):  # what a measured local run can show
        assert message is None, message
        assert "local" in "\n".join(ax.get_title() for ax in fig.axes) + fig._suptitle.get_text()
    else:  # no schedule records, nothing modelled
        assert message


def test_report_from_a_real_run(real_results, tmp_path):
    page = write_report([real_results], tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 8
    assert "<td>local</td>" in page and "nvrar" in page
