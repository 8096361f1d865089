"""``commbench import nccl-tests`` of nccl-tests' ``-J`` JSON files (per-iteration data
from ``-I``), the new collectives' OSU and nccl-tests binaries, and bad files named by
file and line (fixtures in tests/fixtures/external/, sources in SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench.analysis.load import load_all
from commbench.cli import main
from commbench.jobs import external

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "external"
T4 = FIXTURES / "nccl-tests-all_reduce-J-I-t4.json"
AG4 = FIXTURES / "nccl-tests-all_gather-J-I-4proc.json"


def parse(path: Path, **context) -> list[dict]:
    return external.parse_output("nccl-tests", path.read_text(), str(path), context)


def test_genuine_j_file_out_of_and_in_place_with_per_iteration_times():
    oop, ip = parse(T4)
    assert (oop["inplace"], ip["inplace"]) == (0, 1)
    assert oop["collective"] == "allreduce" and oop["impl"] == "nccl-tests:all_reduce"
    assert oop["nranks"] == 2 and oop["dtype"] == "float16" and oop["size_bytes"] == 128 << 20
    assert oop["time_us"] == pytest.approx(23418.69756) and ip["time_us"] == pytest.approx(
        23475.41604
    )
    assert oop["busbw_GBps"] == pytest.approx(5.731221, rel=1e-6)  # nccl-tests' own busbw
    assert oop["time_us_p50"] == pytest.approx(23453.439713) and oop["time_reduction"] == "avg"
    assert oop["info"]["count"] == 67108864 and oop["info"]["nwrong"] == 0
    assert "NCCL 2.29.3" in oop["source"] and oop["hostnames"] == ["22f64f592750"]
    raw = oop[external.RAW_KEY]
    assert raw["rows"] == "max over processes" and len(raw["samples_us"]) == 1
    assert len(raw["samples_us"][0]) == 50 and raw["samples_us"][0][0] == pytest.approx(
        23677.312851
    )
    assert raw["point"] == 0 and raw["run_id"] == oop["run_id"] == "nccl-tests-2026-08-21 03:26:03"


def test_per_process_rows_become_rank_times():
    recs = parse(AG4)
    assert [(r["size_bytes"], r["inplace"]) for r in recs] == [
        (1 << 20, 0), (1 << 20, 1), (4 << 20, 0), (4 << 20, 1)]  # fmt: skip
    first = recs[0]
    assert first["collective"] == "allgather" and first["nranks"] == 4
    assert first["hostnames"] == ["node-a", "node-b"]
    assert first["busbw_GBps"] == pytest.approx(first["algbw_GBps"] * 3 / 4)
    raw = first[external.RAW_KEY]
    assert raw["rows"] == "process" and len(raw["samples_us"]) == 4
    slow = max(range(4), key=lambda p: first["rank_time_us"][p])
    assert slow == 2 and first["time_us_max"] == pytest.approx(first["rank_time_us"][2])


def test_import_cli_writes_the_per_iteration_times_to_the_raw_side_file(tmp_path, capsys):
    out = tmp_path / "imported.jsonl"
    assert (
        main(["import", "nccl-tests", str(AG4), str(T4), "--out", str(out), "--system", "x"]) == 0
    )
    assert "6 record(s) from 2 file(s)" in capsys.readouterr().out
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    raw = [json.loads(x) for x in (tmp_path / "imported.raw.jsonl").read_text().splitlines()]
    assert len(raw) == 6 and all(r["raw_file"] == "imported.raw.jsonl" for r in recs)
    assert [(r["run_id"], r["point"], r["inplace"]) for r in raw] == [
        (r["run_id"], r["point"], r["inplace"]) for r in recs]  # fmt: skip
    assert all(external.RAW_KEY not in r for r in recs)
    points, _ = load_all(out)
    assert set(points.collective) == {"allgather", "allreduce"} and set(points.inplace) == {0, 1}


def test_import_cli_of_the_new_osu_binary(tmp_path):
    out = tmp_path / "osu.jsonl"
    osu = str(FIXTURES / "osu_allgather-7.5.2-riker.txt")
    assert main(["import", "osu", osu, "--out", str(out), "--nranks", "16"]) == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert recs[-1]["impl"] == "osu:osu_allgather" and recs[-1]["size_bytes"] == 16 << 20
    assert recs[-1]["busbw_GBps"] == pytest.approx((16 << 20) / 1111.72e3 * 15 / 16)


def _cut(text: str, marker: str) -> str:
    return text[: text.index(marker)]


BAD = [
    ("no results", (FIXTURES / "nccl-tests-all_reduce-J-no-results.json").read_text(),
     "x.json:1: no results in this nccl-tests JSON file"),
    ("cut off", _cut(T4.read_text(), '"in_place_per_iter"'),
     "x.json:1: not a whole nccl-tests JSON file"),
    ("garbled time", T4.read_text().replace('"time":23475.416040', '"time":"nan"'),
     "x.json:1: results[0].in_place.time 'nan' is not a number"),
    ("unknown binary", T4.read_text().replace("all_reduce_perf", "hypercube_perf"),
     "x.json:1: nccl-tests binary 'hypercube_perf' is not one commbench imports"),
    ("tool error", T4.read_text().replace('"errors":[""]', '"errors":["NCCL WARN Timeout"]'),
     "x.json:1: nccl-tests reported an error: NCCL WARN Timeout"),
    ("wrong results", T4.read_text().replace('"count":0,"okay":"true"', '"count":3,"okay":"false"'),
     "x.json:1: nccl-tests reported 3 wrong result(s)"),
]  # fmt: skip


@pytest.mark.parametrize("label,text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_j_files_name_file_and_line(label, text, message):
    with pytest.raises(ValueError) as err:
        external.parse_output("nccl-tests", text, "x.json", {})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_pretty_printed_file_names_the_line_of_the_bad_row():
    doc = json.loads(AG4.read_text())
    doc["results"][1]["out_of_place"]["time"] = None
    text = json.dumps(doc, indent=1)
    lines = text.splitlines()
    size = next(i for i, x in enumerate(lines) if x.strip() == '"size": 1048576,')
    size = next(i for i, x in enumerate(lines) if x.strip() == '"size": 4194304,' and i > size)
    assert lines[size - 1].strip() == "{"  # row 1 opens on the line before its size: line `size`
    with pytest.raises(ValueError, match=rf"^x.json:{size}: results\[1\].out_of_place.time"):
        external.parse_output("nccl-tests", text, "x.json", {})


def test_import_cli_bad_json_is_one_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "cut.json"
    bad.write_text(_cut(T4.read_text(), '"in_place"'))
    out = tmp_path / "r.jsonl"
    assert main(["import", "nccl-tests", str(T4), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}:1: not a whole nccl-tests JSON file" in err[0]
    assert not out.exists()


def test_new_collectives_map_to_their_binaries():
    assert external.parse_external("nccl-tests", "allgather") == ("nccl-tests", "all_gather_perf")
    assert external.parse_external("rccl-tests", "reducescatter")[1] == "reduce_scatter_perf"
    assert external.parse_external("osu", "broadcast") == ("osu", "osu_bcast")
    assert external.parse_external("nccl-tests", "alltoallv") == ("nccl-tests", None)


def test_rccl_tests_json_lines_of_the_new_collectives():
    text = (FIXTURES / "rccl-tests-all_reduce-output_file.json").read_text()
    for name, coll in (("AllGather", "allgather"), ("ReduceScatter", "reducescatter"),
                       ("Broadcast", "broadcast")):  # fmt: skip
        recs = external.parse_output("rccl-tests", text.replace("AllReduce", name), "f", {})
        assert {r["collective"] for r in recs} == {coll} and all(r["inplace"] == 0 for r in recs)
        assert recs[0]["busbw_factor"] == (1.0 if coll == "broadcast" else 0.75)
