"""``commbench run`` under mpiexec: every implementation against MPI's answer, records,
--resume, failures on one rank, the watchdog, and bad input."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from commbench.kernels.registry import implementations
from tests.mpirun import ROOT, mpi_env, run_mpi

RECORD_FIELDS = {
    "run_id", "timestamp", "git_sha", "system", "hostnames", "nodes", "gpus_per_node",
    "nranks", "backend", "collective", "impl", "params", "dtype", "size_bytes", "count",
    "metric_bytes", "workload", "seed", "timing_mode", "iters", "warmup", "time_us_min",
    "time_us_avg", "time_us_max", "time_us_p50", "time_us_p99", "algbw_GBps", "busbw_GBps",
    "busbw_factor", "nwrong", "versions", "env", "rank_time_us", "rank_finish_us",
    "modelled", "raw_file", "host_us", "rank_host_us", "host_bound", "timed_loop",
}  # fmt: skip


def records(path) -> pd.DataFrame:
    return pd.read_json(path, lines=True)


def cpu_impls(collective: str) -> list[str]:
    return [s.name for s in implementations(collective) if "cpu" in s.backends]


ALLREDUCE_SIZES = {
    "int32": ("-b", "4", "-e", "36", "-i", "16"),
    "bf16": ("-b", "2", "-e", "128K", "-f", "16"),
}
RESUME = ["allreduce", "--impl", "mpi", "-n", "2", "-w", "1", "--out", "{tmp}/resume.jsonl"]

#: Every successful ``commbench run`` of this file (label -> (ranks, ARGS)), run through
#: the CLI in one job with other files' 8-rank runs (the ``driver_runs`` fixture).
DRIVER_RUNS = {
    **{f"allreduce/{impl}/{dtype}": (8, [
        "allreduce", "--impl", impl, "--gpus-per-node", "4", "-d", dtype, *sizes, "-n", "2",
        "-w", "1", "--out", f"{{tmp}}/allreduce-{impl}.jsonl"])
       for impl in cpu_impls("allreduce") for dtype, sizes in ALLREDUCE_SIZES.items()},
    **{f"alltoallv/{impl}": (8, [
        "alltoallv", "--impl", impl, "--gpus-per-node", "4", "-b", "1000", "-e", "64K", "-f",
        "8", "-n", "2", "-w", "1", "--workload", "random@3",
        "--out", f"{{tmp}}/alltoallv-{impl}.jsonl"])
       for impl in cpu_impls("alltoallv")},
    "fanout-done-when": (8, [
        "alltoallv", "--impl", "fanout", "--gpus-per-node", "4", "-b", "1K", "-e", "1M",
        "-c", "1", "--workload", "random", "--out", "{tmp}/F.jsonl"]),
    "latency": (8, ["allreduce", "--impl", "mpi", "-b", "1K", "-e", "1K", "-n", "7",
                    "--timing", "latency", "--out", "{tmp}/latency.jsonl"]),
    "resume-first": (8, [*RESUME, "-b", "1K", "-e", "4K"]),
    "resume-again": (8, [*RESUME, "-b", "1K", "-e", "16K", "--resume"]),
}  # fmt: skip


@pytest.mark.parametrize("impl", cpu_impls("allreduce"))
def test_allreduce_implementations_match_mpi(driver_runs, impl):
    for dtype in ALLREDUCE_SIZES:
        driver_runs.stdout(f"allreduce/{impl}/{dtype}")
    df = records(driver_runs.tmp / f"allreduce-{impl}.jsonl")
    assert len(df) == 3 + 5 and (df.nwrong == 0).all()
    assert set(df["count"]) >= {1, 5, 9}


@pytest.mark.parametrize("impl", cpu_impls("alltoallv"))
def test_alltoallv_implementations_byte_exact(driver_runs, impl):
    driver_runs.stdout(f"alltoallv/{impl}")
    df = records(driver_runs.tmp / f"alltoallv-{impl}.jsonl")
    assert len(df) == 3 and (df.nwrong == 0).all()


def test_fanout_done_when_command_and_record_schema(driver_runs):
    """The issue's 'done when' command: one record per size, nwrong 0, full schema."""
    stdout = driver_runs.stdout("fanout-done-when")
    tmp = driver_runs.tmp
    df = records(tmp / "F.jsonl")
    assert list(df.size_bytes) == [1024 << k for k in range(11)]
    assert (df.nwrong == 0).all()
    assert RECORD_FIELDS <= set(df.columns)
    row = df.iloc[0]
    assert (row.nodes, row.gpus_per_node, row.nranks) == (2, 4, 8)
    assert len(row.rank_time_us) == 8 and len(row.rank_finish_us) == 8
    assert row.time_us_min <= row.time_us_avg <= row.time_us_max
    assert row.time_us == pytest.approx(row.time_us_max)  # -a 3 is alltoallv's default
    assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 7 / 8)
    assert row.algbw_GBps == pytest.approx(row.metric_bytes / (row.time_us * 1e3))
    raw = [json.loads(x) for x in (tmp / "F.raw.jsonl").read_text().splitlines()]
    assert len(raw) == 11 and len(raw[0]["rank_time_us"]) == 8
    assert "Avg bus bandwidth" in stdout and "#wrong" in stdout
    # every point's interval: 20 per-iteration times of the slowest rank, their median's
    # 95% interval (printed), and where the bytes went over the direct routes
    assert (df.ci_samples == 20).all() and (df.ci_method == "bootstrap").all()
    assert (df.ci_low_us <= df.ci_median_us).all() and (df.ci_median_us <= df.ci_high_us).all()
    assert df.iter_time_us.map(len).eq(20).all()
    # the slowest rank's per-call times add up to its time (-a 3) over the 20 calls
    assert df.iter_time_us.map(sum).div(20).to_numpy() == pytest.approx(df.time_us, rel=0.02)
    assert "95% CI" in stdout and f"[{row.ci_low_us:.2f}, {row.ci_high_us:.2f}]" in stdout
    tiers = df.tiers.iloc[-1]
    assert tiers["routing"] == "direct" and tiers["nic_bytes"] > 0 and tiers["nic_GBps"] > 0


def test_latency_mode_keeps_samples(driver_runs):
    driver_runs.stdout("latency")
    raw = json.loads((driver_runs.tmp / "latency.raw.jsonl").read_text())
    assert len(raw["samples_us"]) == 8 and len(raw["samples_us"][0]) == 7
    rec = records(driver_runs.tmp / "latency.jsonl").iloc[0]
    slowest = [max(rank[i] for rank in raw["samples_us"]) for i in range(7)]
    assert rec.ci_samples == 7 and rec.iter_time_us == pytest.approx(slowest, abs=1e-3)


def test_resume_skips_finished_points(driver_runs):
    driver_runs.stdout("resume-first")
    stdout = driver_runs.stdout("resume-again")
    assert stdout.count("(--resume: recorded before)") == 3
    df = records(driver_runs.tmp / "resume.jsonl")
    assert sorted(df.size_bytes) == [1024, 2048, 4096, 8192, 16384]


def test_error_on_one_rank_aborts_job_and_keeps_records(tmp_path):
    out = tmp_path / "r.jsonl"
    script = str(ROOT / "tests/scripts/faulty_impls.py")
    t0 = time.monotonic()
    proc = run_mpi(4, [script, "run", "allreduce", "--impl", "test-raise", "-b", "1K",
                       "-e", "16K", "-n", "2", "--out", str(out)], timeout=60)  # fmt: skip
    assert time.monotonic() - t0 < 30
    assert proc.returncode != 0
    host = socket.gethostname()
    assert f"rank 1 on {host}: error: RuntimeError: injected failure on rank 1" in proc.stderr
    df = records(out)  # the two points before the failure, intact
    assert list(df.size_bytes) == [1024, 2048] and (df.nwrong == 0).all()


def test_watchdog_turns_a_hang_into_an_abort(tmp_path):
    script = str(ROOT / "tests/scripts/faulty_impls.py")
    t0 = time.monotonic()
    proc = run_mpi(2, [script, "run", "allreduce", "--impl", "test-hang", "-b", "1K",
                       "-e", "1K", "--watchdog", "3"], timeout=60)  # fmt: skip
    assert time.monotonic() - t0 < 30
    assert proc.returncode != 0
    assert "watchdog: no progress for 3 s" in proc.stderr
    assert "allreduce --impl test-hang at size 1024: warm-up calls" in proc.stderr


@pytest.mark.parametrize("timing,calls", [("latency", 10), ("pipelined", 9)])
def test_timed_calls_are_not_the_loops_edges(tmp_path, timing, calls):
    """Latency mode runs one untimed call each side of its timed ones in the same loop,
    pipelined mode one after them (harness.iterclock.latency_calls): test-ordinal's n-th
    call sleeps by n, so the samples say which calls were timed, and it counts the calls
    (1 warm-up, 5 timed, the edges, the finish-time call and the checked call)."""
    script = str(ROOT / "tests/scripts/faulty_impls.py")
    out = tmp_path / "r.jsonl"
    proc = run_mpi(2, [script, "run", "allreduce", "--impl", "test-ordinal", "-b", "1K",
                       "-e", "1K", "-n", "5", "-w", "1", "-c", "1", "--timing", timing,
                       "--out", str(out)], timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"test-ordinal: {calls} calls" in proc.stderr
    if timing == "latency":
        raw = json.loads(out.with_suffix(".raw.jsonl").read_text())
        slowest = [max(rank[i] for rank in raw["samples_us"]) for i in range(5)]
        # test-ordinal's n-th call sleeps (1 + n % 5) x 4 ms (importing faulty_impls here
        # would register its implementations in this process); calls 0-1: warm-up, edge
        slept = [(1 + n % 5) * 4000 for n in range(2, 7)]
        assert sorted(range(5), key=slowest.__getitem__) == sorted(range(5), key=slept.__getitem__)
        assert all(s >= z for s, z in zip(slowest, slept, strict=True))


def test_a_rank_done_early_with_the_finish_time_call_waits_for_the_others(tmp_path):
    """The finish-time call (``rank_finish_us``) ends in a barrier: a rank done early does
    not fill the checked call's buffers (work that takes a shared core) while another
    rank is still in it. test-late-end's rank 1 ends each call 30 ms after the others."""
    script = str(ROOT / "tests/scripts/faulty_impls.py")
    proc = run_mpi(2, [script, "run", "allreduce", "--impl", "test-late-end", "-b", "1K",
                       "-e", "1K", "-n", "1", "-w", "0", "-c", "1", "--timing", "latency",
                       "--out", str(tmp_path / "r.jsonl")],
                   env={"COMMBENCH_TEST_EVENTS": str(tmp_path)}, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    # calls: the loop's edge, the timed call, the edge, the finish-time call, the checked
    finish_end = max([t for kind, t in got if kind == "end"][3] for got in events)
    last_fill = [max(t for kind, t in got if kind == "fill") for got in events]
    assert min(last_fill) > finish_end


BAD_INPUT = [
    (["foo", "--impl", "mpi"], "unknown collective"),
    (["allreduce", "--impl", "nope"], "unknown implementation"),
    (["allreduce", "--impl", "mpi", "--backend", "tpu"], "unknown backend"),
    (["allreduce", "--impl", "mpi", "-b", "1M", "-e", "1K"], "larger than"),
    (["allreduce", "--impl", "mpi", "-b", "6", "-e", "6"], "not a multiple"),
    (["allreduce", "--impl", "mpi", "--gpus-per-node", "3", "-b", "8", "-e", "8"], "does not divide"),
    (["allreduce", "--impl", "mpi", "--backend", "cuda"], "cannot run here"),
    (["alltoallv", "--impl", "fanout", "--workload", "zipf:x"], "zipf"),
    (["alltoallv", "--impl", "fanout", "--inplace", "1"], "--inplace applies to"),
    (["allgather", "--impl", "ring", "-r", "1"], "-r/--root applies to broadcast"),
    (["broadcast", "--impl", "tree", "-r", "2", "-b", "8", "-e", "8"], "is not a rank of this 1-rank job"),
    (["broadcast", "--impl", "mpi", "-b", "6", "-e", "6"], "not a multiple"),
]  # fmt: skip


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, args, message):
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", "run", *args, "--out", str(out)],
        env=mpi_env(), cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if "cuda" in args and "cannot run here" not in proc.stderr:
        pytest.skip("a GPU backend is usable on this machine")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("args,message", [(["allreduce", "--impl", "bogus"], "unknown implementation"),
                                          (["allreduce", "--bogus"], "unrecognized arguments")])  # fmt: skip
def test_bad_input_under_a_launcher_is_said_once_not_by_every_rank(tmp_path, args, message):
    out = tmp_path / "r.jsonl"
    proc = run_mpi(3, ["-m", "commbench", "run", *args, "--out", str(out)], timeout=120)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if message in line]
    assert len(said) == 1, proc.stderr
    assert not out.exists()
