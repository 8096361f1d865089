"""The guarantees (README "Guarantees"), without MPI: results files stay whole JSONL through
cut-offs and a full disk, every profile limit holds whatever flags are given, and every CLI
error is one line, exit 2, nothing written. The multi-rank half is test_reliability_mpi.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.analysis import records
from commbench.analysis.load import read_records
from commbench.cli import build_parser, main
from commbench.harness import results
from commbench.harness.watchdog import BOARD, describe_board, format_ranks
from commbench.kernels.registry import implementations, lookup


def record(size: int) -> dict:
    return {"collective": "allreduce", "impl": "mpi", "system": "local", "nranks": 2,
            "size_bytes": size, "time_us": 1.0, "time_us_max": 1.0, "dtype": "float32",
            "backend": "cpu"}  # fmt: skip


def lines_of(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


# ---------------------------------------------------------------- results files


@settings(max_examples=40, deadline=None)
@given(whole=st.integers(0, 4), cut=st.floats(0.0, 1.0, exclude_max=True))
def test_a_cut_off_tail_is_set_aside_never_glued(tmp_path_factory, whole, cut):
    """Any cut of the last record: the whole records stay, the next append is its own line."""
    path = tmp_path_factory.mktemp("cut") / "r.jsonl"
    writer = results.RecordWriter(path)
    for k in range(whole + 1):
        writer.write(record(1024 << k))
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: last + int(cut * (len(data) - 1 - last))])
    writer.repair()
    writer.write(record(1))
    got = lines_of(path)
    assert [r["size_bytes"] for r in got] == [1024 << k for k in range(whole)] + [1]
    assert len(read_records(path)) == whole + 1


def test_repair_keeps_a_whole_record_that_lost_its_newline(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record(8)) + "\n" + json.dumps(record(16)))
    (message,) = results.RecordWriter(path).repair()
    assert "lacked its newline" in message
    assert [r["size_bytes"] for r in lines_of(path)] == [8, 16]


def test_repair_quarantines_the_fragment_with_a_message(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record(8)) + '\n{"collective": "allre')
    (message,) = results.RecordWriter(path).repair()
    assert "moved to r.jsonl.torn" in message
    assert (tmp_path / "r.jsonl.torn").read_text() == '{"collective": "allre\n'
    assert results.RecordWriter(path).repair() == []


def test_reader_skips_only_a_torn_last_line(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record(8)) + '\n{"coll')
    assert len(read_records(path)) == 1
    assert "r.jsonl:2: skipping a cut-off last line" in capsys.readouterr().err
    path.write_text('{"coll\n' + json.dumps(record(8)) + "\n")
    with pytest.raises(ValueError, match=r"r.jsonl:1: not valid JSON"):
        read_records(path)


def test_resume_keys_refuse_a_non_object_line_with_its_line_number(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record(8)) + "\n[1, 2]\n")
    with pytest.raises(ValueError, match=r"r.jsonl:2: expected a JSON object, got list"):
        records.read_done(path)


def test_time_reduction_is_part_of_the_resume_key():
    assert records.point_key({**record(8), "time_reduction": "max"}) != records.point_key(
        {**record(8), "time_reduction": "avg"}
    )


@pytest.fixture
def tiny_disk(tmp_path, request):
    """A 40 KiB tmpfs (or the size a test gives with ``indirect`` parametrisation),
    unmounted even when the test fails (needs root, as CI has)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    size = getattr(request, "param", "40k")
    where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_rolls_the_append_back_and_names_the_file(tiny_disk):
    out = tiny_disk / "r.jsonl"
    writer = results.RecordWriter(out)
    big = {**record(8), "pad": "x" * 3000}
    written = 0
    with pytest.raises(OSError, match=r"r.jsonl: cannot append the record \(No space left"):
        for _ in range(100):
            writer.write(big, {"point": written, "pad": "y" * 1000})
            written += 1
    assert 0 < written < 100
    assert len(lines_of(out)) == written  # whole lines only: the failed one rolled back
    assert len(lines_of(writer.raw_path)) == written
    (tiny_disk / "filler").unlink(missing_ok=True)


# ---------------------------------------------------------------- profile limits


def render_args(tmp_path, *extra):
    return ["jobs", "render", "--system", "perlmutter", "--nodes", "2", "--experiment",
            "nvrar-paper", "--account", "m0000", "-o", str(tmp_path / "jobs"), *extra]  # fmt: skip


@pytest.mark.parametrize(
    "option,fix",
    [("--nodes=5000", "use --nodes"), ("--time=99:00:00", "use -t/--time"),
     ("--account=other", "use --account"), ("--ntasks=99999", "use --tasks-per-node"),
     ("--qos=premium", "use --qos")],
)  # fmt: skip
def test_extra_sbatch_cannot_override_what_the_limits_check(tmp_path, capsys, option, fix):
    assert main(render_args(tmp_path, f"--extra-sbatch={option}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0] and fix in err[0]
    assert not (tmp_path / "jobs").exists()


def test_extra_sbatch_still_takes_other_options(tmp_path):
    assert main(render_args(tmp_path, "--extra-sbatch=--mail-type=END")) == 0
    (script,) = (tmp_path / "jobs").rglob("job.sh")
    text = script.read_text()
    assert "--mail-type=END" in text and text.count("#SBATCH -N ") == 1


# ---------------------------------------------------------------- one-line errors


def test_every_implementation_declares_its_params():
    for spec in implementations():
        with pytest.raises(
            ValueError, match=re.escape(f"--impl {spec.name} takes no --param 'bogus'")
        ):
            spec.check_params({"bogus": 1})
    lookup("alltoallv", "fast").check_params({"strategy": "bvn", "groups": "split"})
    lookup("allreduce", "nvrar").check_params({"timeout_s": 5})


def test_one_seed_default_for_every_command():
    parser = build_parser()
    seeds = {
        "run": parser.parse_args(["run", "alltoallv"]).seed,
        "simulate": parser.parse_args(["simulate", "alltoallv", "--system", "h200"]).seed,
        "workload": parser.parse_args(["workload", "zipf", "--ranks", "4"]).seed,
        "schedule": parser.parse_args(["schedule", "-s", "2", "-g", "2"]).seed,
    }
    assert len(set(seeds.values())) == 1, seeds


def trace_file(tmp_path) -> Path:
    path = tmp_path / "moe-4x8.txt"
    path.write_text("\n".join(map(str, np.arange(32 * 32 * 2))) + "\n")
    return path


def bad_matrix(tmp_path) -> Path:
    path = tmp_path / "m.txt"
    path.write_text("1 2\n3 x\n")
    return path


def resumed_file(tmp_path) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record(8)) + "\n42\n")
    return path


#: (argv, what the one line must say); ``{tmp}`` is the test's folder, ``{out}`` a file in
#: it that must not appear.
BAD_COMMANDS = [
    (["workload", "zipf", "--ranks", "4", "-o", "{tmp}"], "-o {tmp}: is a directory"),
    (["simulate", "alltoallv", "--system", "h200", "--servers", "2", "--out", "{tmp}"],
     "--out {tmp}: is a directory"),
    (["report", "{tmp}", "-o", "{tmp}"], "-o {tmp}: is a directory"),
    (["workload", "zipf:0.8", "--ranks", "100000", "-o", "{out}"], "use fewer ranks"),
    (["schedule", "-s", "4000", "-g", "8"], "scheduling 32000 GPUs"),
    (["run", "allreduce", "--impl", "mpi", "--watchdog", "inf"], "--watchdog inf: give a finite"),
    (["run", "allreduce", "--impl", "mpi", "--watchdog", "nan"], "--watchdog nan: give a finite"),
    (["run", "alltoallv", "--impl", "fanout", "--param", "strategy=bvn", "--out", "{out}"],
     "--impl fanout takes no --param 'strategy'"),
    (["run", "allreduce", "--impl", "mpi", "--out", "/proc/commbench/r.jsonl"],
     "--out /proc/commbench/r.jsonl"),
    (["run", "allreduce", "--impl", "mpi", "--out", "{resumed}", "--resume"],
     "r.jsonl:2: expected a JSON object, got int"),
    (["run", "alltoallv", "--impl", "fanout", "--workload", "file:{matrix}", "--out", "{out}"],
     "m.txt:2: field 2 is 'x'"),
    (["run", "alltoallv", "--impl", "fanout", "--workload", "trace:{trace},ranks=4",
      "--out", "{out}"], "ranks=4 but the file name says 32 ranks"),
    (["sweep", "--timeout", "0", "--out-dir", "{out}"], "--timeout 0.0: give a finite"),
]  # fmt: skip


@pytest.mark.parametrize(
    "argv,message", BAD_COMMANDS, ids=[" ".join(a[:2]) for a, _ in BAD_COMMANDS]
)
def test_cli_errors_are_one_line_exit_2_nothing_written(tmp_path, capsys, argv, message):
    names = {"tmp": tmp_path, "out": tmp_path / "new" / "out.jsonl",
             "matrix": bad_matrix(tmp_path), "trace": trace_file(tmp_path),
             "resumed": resumed_file(tmp_path)}  # fmt: skip
    before = sorted(tmp_path.rglob("*"))
    assert main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(**names) in err[0], err
    assert sorted(tmp_path.rglob("*")) == before


# ---------------------------------------------------------------- the watchdog's words


def test_watchdog_names_the_rank_that_stopped_and_what_the_others_do():
    board = np.zeros(4, dtype=BOARD)
    now = 100.0
    for slot in range(4):
        board[slot] = (slot, 1000 + slot, now - 0.1, now - 5, b"point 3/9: timed calls")
    board[2] = (2, 1002, now - 4.0, now - 4.5, b"point 3/9: warm-up calls")
    line = describe_board(board, now, stale=1.5)
    assert line.startswith("rank 2 (pid 1002) stopped responding 4.0 s ago, in: point 3/9: warm")
    assert "ranks 0-1,3 in: point 3/9: timed calls (no progress for 5.0 s)" in line
    assert format_ranks([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
