"""External baselines: parsing nccl-tests / OSU output (genuine published outputs in
tests/fixtures/external/, sources in SOURCES.md), `commbench import`, job arguments."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from commbench.analysis.load import load_all
from commbench.cli import main
from commbench.jobs import external

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "external"


def parse(tool: str, name: str, **context) -> list[dict]:
    path = FIXTURES / name
    return external.parse_output(tool, path.read_text(), str(path), context)


def test_nccl_tests_all_reduce_with_root_and_wrong_columns():
    recs = parse("nccl-tests", "nccl-tests-all_reduce-gb200-nvl72.txt", nranks=72)
    assert [r["size_bytes"] for r in recs] == [536870912 * 2**k for k in range(5)]
    first = recs[0]
    assert first["impl"] == "nccl-tests:all_reduce" and first["collective"] == "allreduce"
    assert first["time_us"] == 1806.7 and first["info"]["in_place_us"] == 1835.9
    assert first["dtype"] == "float32" and first["info"]["nwrong"] == 0
    # our algbw/busbw from size and time agree with the tool's printed columns (297.16, 586.06)
    assert first["algbw_GBps"] == pytest.approx(297.16, rel=1e-3)
    assert first["busbw_GBps"] == pytest.approx(586.06, rel=1e-3)
    assert first["source"] == "nccl-tests all_reduce_perf"


def test_nccl_tests_old_table_version_and_binary_from_the_command_line():
    recs = parse("nccl-tests", "nccl-tests-all_reduce-2.8.4-256gpu.txt", nranks=256)
    assert len(recs) == 6
    assert recs[0]["source"] == "nccl-tests all_reduce_perf (NCCL 2.8.4+cuda10.1)"
    assert recs[0]["busbw_GBps"] == pytest.approx(45.65, rel=1e-3)
    assert "nwrong" not in recs[0]["info"]  # the old "error" column is N/A here


def test_nccl_tests_alltoall_ranks_counted_from_the_device_lines():
    recs = parse("nccl-tests", "nccl-tests-alltoall-h20.txt")
    assert {r["impl"] for r in recs} == {"nccl-tests:alltoall"}
    assert recs[0]["nranks"] == 8
    assert recs[0]["busbw_GBps"] == pytest.approx(15.78, rel=1e-3)


def test_nccl_tests_tagged_output_and_empty_redop_column():
    recs = parse("nccl-tests", "nccl-tests-alltoall-tagged.txt", nranks=16)
    assert [r["size_bytes"] for r in recs] == [1024 * 2**k for k in range(7)]
    assert recs[0]["collective"] == "alltoall" and recs[0]["time_us"] == 28.52


def test_osu_collectives_and_latency():
    a2a = parse("osu", "osu_alltoall-5.6.2.txt", nranks=4)
    assert a2a[0]["impl"] == "osu:osu_alltoall" and a2a[0]["source"] == "osu osu_alltoall v5.6.2"
    assert a2a[0]["size_bytes"] == 2 * 4  # OSU's size is per peer
    assert a2a[0]["info"]["max_latency_us"] == 118.85 and a2a[0]["time_us"] == 74.23
    v = parse("osu", "osu_alltoallv-7.5-tail.txt", nranks=384)
    assert v[0]["collective"] == "alltoallv" and v[0]["info"]["p99_tail_lat_us"] == 634.30
    assert v[0]["dtype"] == "int8" and a2a[0]["dtype"] is None  # "# Datatype: MPI_CHAR." (7.x)
    lat = parse("osu", "osu_latency-5.0.txt", nranks=99)
    assert len(lat) == 24 and lat[0]["nranks"] == 2 and lat[0]["collective"] == "sendrecv"
    assert lat[-1]["size_bytes"] == 4194304 and lat[-1]["time_us"] == 497.37


@pytest.mark.parametrize(
    ("tool", "name", "context", "message"),
    [
        ("osu", "osu_alltoall-5.7-bus-error.txt", {"nranks": 4}, ":18: OSU reported a failure"),
        ("osu", "osu_reduce-7.3-cuda.txt", {}, ":1: OSU test 'Reduce Latency' is not one"),
        ("osu", "osu_alltoall-5.6.2.txt", {}, "give --nranks N"),
        ("osu", "nccl-tests-alltoall-h20.txt", {}, "not OSU output"),
        ("nccl-tests", "osu_latency-5.0.txt", {}, ":29: no result table"),
    ],
)
def test_genuine_failures_and_wrong_files_name_the_line(tool, name, context, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse(tool, name, **context)


def _cut(name: str, keep: int, tail: str = "") -> str:
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    return "".join(lines[:keep]) + tail


@pytest.mark.parametrize(
    ("tool", "text", "message"),
    [
        # cut in the middle of a row
        (
            "nccl-tests",
            _cut(
                "nccl-tests-all_reduce-gb200-nvl72.txt",
                6,
                "  1073741824  268435456  float  sum  -1  3108.8",
            ),
            ":7: a nccl-tests row needs",
        ),
        # cut after the header
        (
            "nccl-tests",
            _cut("nccl-tests-all_reduce-gb200-nvl72.txt", 5),
            ":5: a table header but no rows",
        ),
        # two runs' output in one file
        (
            "nccl-tests",
            _cut("nccl-tests-alltoall-h20.txt", 16)
            + "".join(_cut("nccl-tests-alltoall-h20.txt", 16).splitlines(keepends=True)[13:]),
            ":17: size 1048576 after 4194304: rows out of order",
        ),
        # a failure line
        (
            "nccl-tests",
            _cut(
                "nccl-tests-alltoall-h20.txt",
                14,
                "host: Test NCCL failure common.cu:1045 'unhandled system error'\n",
            ),
            ":15: nccl-tests reported a failure",
        ),
        # an OSU row cut short
        (
            "osu",
            _cut("osu_alltoall-5.6.2.txt", 4, "16                    121.17"),
            ":5: an OSU row has 5 column",
        ),
        # two ranks' lines interleaved
        (
            "osu",
            _cut(
                "osu_alltoall-5.6.2.txt",
                5,
                "8                      47.21             31.25             64.49        1000\n",
            ),
            ":6: size 8 after 8",
        ),
        ("osu", _cut("osu_alltoall-5.6.2.txt", 2), ":2: an OSU header but no result rows"),
    ],
)
def test_truncated_interleaved_and_error_outputs(tool, text, message):
    with pytest.raises(ValueError, match=message):
        external.parse_output(tool, text, "run.log", {"nranks": 8})


def test_import_cli_writes_records_that_load_all_reads(tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    files = [
        str(FIXTURES / "nccl-tests-alltoall-h20.txt"),
        str(FIXTURES / "osu_alltoall-5.6.2.txt"),
    ]
    assert main(["import", "nccl-tests", files[0], "--out", str(out), "--system", "h20"]) == 0
    assert (
        main(["import", "osu", files[1], "--out", str(out), "--nranks", "8", "--run-id", "r1"]) == 0
    )
    df, _ = load_all(out)
    assert len(df) == 3 + 13
    assert set(df["impl"]) == {"nccl-tests:alltoall", "osu:osu_alltoall"}
    assert set(df["kind"]) == {"measured"}
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["run_id"] == "r1" and row["nranks"] == 8 and math.isfinite(row["busbw_GBps"])


def test_import_cli_bad_file_writes_nothing(tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    good = str(FIXTURES / "osu_alltoall-5.6.2.txt")
    bad = str(FIXTURES / "osu_alltoall-5.7-bus-error.txt")
    assert main(["import", "osu", good, bad, "--nranks", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "osu_alltoall-5.7-bus-error.txt:18:" in err
    assert not out.exists()


def test_external_command_mirrors_the_step():
    cmd = external.external_command(
        "nccl-tests",
        "all_reduce_perf",
        min_size=65536,
        max_size=2 << 20,
        factor=2,
        iters=1000,
        warmup=200,
        check=1,
        dtype="bfloat16",
        backend="cuda",
    )
    assert cmd.args == (
        "-b",
        "65536",
        "-e",
        "2097152",
        "-f",
        "2",
        "-n",
        "1000",
        "-w",
        "200",
        "-c",
        "1",
        "-g",
        "1",
        "-d",
        "bfloat16",
    )
    osu = external.external_command(
        "osu",
        "osu_allreduce",
        min_size=65536,
        max_size=262144,
        factor=4,
        iters=10,
        warmup=2,
        check=1,
        dtype="float32",
        backend="cpu",
        osu_device="cuda",
    )
    assert osu.args == ("-m", "65536:262144", "-i", "10", "-x", "2", "-T", "mpi_float")
    assert external.parse_external("osu", "alltoallv") == ("osu", "osu_alltoallv")
    assert external.parse_external("nccl-tests", "alltoallv") == ("nccl-tests", None)
    with pytest.raises(ValueError, match="the tool must be one of"):
        external.parse_external("imb", "allreduce")


def test_agreement_table_pairs_commbench_with_the_tool_in_the_same_run(tmp_path):
    from commbench.analysis.report import write_report
    from commbench.analysis.tables import agreement_table

    out = tmp_path / "results.jsonl"
    osu = str(FIXTURES / "osu_alltoall-5.6.2.txt")
    assert main(["import", "osu", osu, "--out", str(out), "--nranks", "4", "--run-id", "A"]) == 0
    ours = []
    for run, size, t in (("A", 8, 23.6), ("A", 16, 129.33), ("B", 8, 1.0)):
        ours.append(
            {
                "run_id": run,
                "system": "unknown",
                "nranks": 4,
                "collective": "alltoall",
                "impl": "mpi",
                "size_bytes": size,
                "time_us": t,
                "time_us_avg": t,
            }
        )
    with out.open("a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in ours)
    points, _ = load_all(out)
    table = agreement_table(points)
    # OSU's 2 B and 4 B per peer are 8 and 16 B per rank on 4 ranks; run B has no OSU
    assert list(table["size_bytes"]) == [8, 16]
    assert list(table["ratio"]) == pytest.approx([23.6 / 74.23, 1.0])
    assert set(table["external"]) == {"osu:osu_alltoall"} and set(table["run_id"]) == {"A"}
    # OSU 5.x prints no max over ranks: figure 1 has no latency line for it, and no crash
    osu_ar = str(FIXTURES / "osu_allreduce-5.4.1-cray.txt")
    assert main(["import", "osu", osu_ar, "--out", str(out), "--nranks", "4", "--run-id", "A"]) == 0
    report = tmp_path / "report.md"
    write_report([out], report, fmt="md")
    text = report.read_text()
    assert "<summary><b>Agreement with nccl-tests / rccl-tests / OSU</b></summary>" in text
    assert "| osu:osu_alltoall |" in text and "| 1.00 |" in text


def test_rccl_tests_json_output_file():
    recs = parse("rccl-tests", "rccl-tests-all_reduce-output_file.json")
    assert [r["size_bytes"] for r in recs] == [1024, 2048, 4096]  # out-of-place rows only
    assert recs[0]["impl"] == "rccl-tests:all_reduce" and recs[0]["nranks"] == 4
    assert recs[0]["busbw_GBps"] == pytest.approx(0.08006609623048194)
    text = (FIXTURES / "rccl-tests-all_reduce-output_file.json").read_text()
    with pytest.raises(ValueError, match=r"run.json:4: not a rccl-tests JSON result line"):
        external.parse_output("rccl-tests", text[: text.index("\n", 400) + 60], "run.json", {})
