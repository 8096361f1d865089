"""The guarantees under mpiexec: --resume never glues a record to a cut-off line, a full
disk leaves whole records, and no phase of a run hangs silently (stopped ranks are named;
slow is not stuck). Small jobs: 2-4 ranks, a few seconds each."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commbench.analysis.load import read_records
from commbench.benchmarks.soak import rank_pids
from tests.mpirun import ROOT, mpi_env, mpiexec, run_mpi
from tests.test_reliability import tiny_disk  # noqa: F401 (fixture)


def commbench(nranks: int, *args: str, timeout: float = 90):
    return run_mpi(nranks, ["-m", "commbench", "run", *args], timeout=timeout)


def start(nranks: int, *args: str, entry: tuple[str, ...] = ("-m", "commbench"),
          env: dict[str, str] | None = None) -> subprocess.Popen:  # fmt: skip
    """Start ``commbench run ARGS...`` on ``nranks`` ranks; ``entry``: Python's arguments
    that run the CLI (``-m commbench`` by default)."""
    cmd = [mpiexec(), "-n", str(nranks), sys.executable, *entry, "run", *args]
    return subprocess.Popen(cmd, env=mpi_env(env), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


def finish(proc: subprocess.Popen, timeout: float, stopped: list[int]) -> tuple[str, str]:
    """Wait for the job; whatever happens, no stopped or stray process outlives the test."""
    try:
        return proc.communicate(timeout=timeout)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_resume_sets_a_cut_off_line_aside_and_appends_whole_records(tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["allreduce", "--impl", "mpi", "-n", "2", "-w", "1", "--out", str(out)]
    assert commbench(2, *args, "-b", "1K", "-e", "2K").returncode == 0
    with out.open("a") as f:  # a run killed in the middle of its next record
        f.write('{"run_id": "x", "collective": "allre')
    proc = commbench(2, *args, "-b", "1K", "-e", "8K", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "moved to r.jsonl.torn" in proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "float32" in line]
    assert len(rows) == 4  # the table shows the points recorded before, too
    assert sum("(--resume: recorded before)" in row for row in rows) == 2
    assert sorted(r["size_bytes"] for r in read_records(out)) == [1024, 2048, 4096, 8192]
    assert out.read_text().endswith("\n")


# 12 records with their intervals and tiers (~3 KB each) and their raw lines fit in 64 KiB,
# not beside the filler
@pytest.mark.parametrize("tiny_disk", ["64k"], indirect=True)
def test_disk_full_stops_with_the_file_named_and_resume_completes(tmp_path, tiny_disk):  # noqa: F811
    (tiny_disk / "filler").write_bytes(b"\0" * 40960)
    out = tiny_disk / "r.jsonl"
    args = ["allreduce", "--impl", "mpi", "-b", "4", "-e", "48", "-i", "4", "-n", "1", "-w", "0",
            "--out", str(out)]  # fmt: skip
    proc = commbench(2, *args)
    assert proc.returncode != 0
    assert f"{out}: cannot append the record (No space left on device)" in proc.stderr
    kept = read_records(out)  # whole records only, however far it got
    assert 0 < len(kept) < 12
    (tiny_disk / "filler").unlink()
    proc = commbench(2, *args, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["size_bytes"] for r in read_records(out)) == list(range(4, 49, 4))


def test_a_stalled_record_write_is_caught_and_named(tmp_path):
    out = tmp_path / "r.jsonl"
    os.mkfifo(out)  # nobody reads it: the write blocks like a stalled filesystem
    t0 = time.monotonic()
    proc = commbench(2, "allreduce", "--impl", "mpi", "-b", "1K", "-e", "1K", "-n", "2",
                     "--out", str(out), "--watchdog", "2")  # fmt: skip
    assert time.monotonic() - t0 < 40
    assert proc.returncode != 0
    assert "watchdog: no progress for 2 s" in proc.stderr
    assert f"rank 0 in: point 1/1, allreduce --impl mpi at size 1024: writing the record to {out} " in proc.stderr  # fmt: skip


def test_a_stopped_rank_is_named_with_what_it_was_doing():
    proc = start(4, "allreduce", "--impl", "ring", "-b", "1K", "-e", "256M", "-n", "3", "-w", "1",
                 "--watchdog", "2")  # fmt: skip
    stopped, seen = [], []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("#  Rank   2"):
                pid = int(line.split("Pid")[1].split()[0])
            if line.startswith("  ") and "float32" in line:  # a first point is done
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
                break
    finally:
        _, err = finish(proc, 60, stopped)
    assert stopped and proc.returncode != 0, f"the job ended first:\n{''.join(seen)}\n{err}"
    # the report that names the stopped rank lists the others as waiting on it (once the
    # job is aborted, the launcher wakes the stopped rank to end it, and it may report too)
    named = [ln for ln in err.splitlines() if f"rank 2 (pid {stopped[0]}) stopped responding" in ln]
    assert named, err
    assert _waiting_ranks(named[0]) == {0, 1, 3}, err


def _waiting_ranks(err: str) -> set[int]:
    """The ranks the watchdog lists as waiting (``rank 1 in: ...; ranks 0,3 in: ...``),
    whatever phase each one was in."""
    ranks: set[int] = set()
    for group in re.findall(r"\branks? ([0-9,-]+) in: ", err):
        for part in group.split(","):
            lo, _, hi = part.partition("-")
            ranks.update(range(int(lo), int(hi or lo) + 1))
    return ranks


def test_a_rank_stopped_at_launch_is_reported_by_the_rank_left_waiting():
    # the CLI with the watchdog's start-up floor at 4 s, not 10 (faulty_impls.py): the
    # rank left waiting ends 6 s sooner; what it reports is the same
    proc = start(2, "allreduce", "--impl", "mpi", "-b", "1K", "-e", "1K", "--watchdog", "2",
                 entry=(str(ROOT / "tests/scripts/faulty_impls.py"),),
                 env={"COMMBENCH_TEST_STARTUP_FLOOR_S": "4"})  # fmt: skip
    stopped = []
    try:
        deadline = time.monotonic() + 20
        while not stopped and time.monotonic() < deadline:
            for pid in rank_pids(proc.pid):
                if _env(pid).get("OMPI_COMM_WORLD_RANK", _env(pid).get("PMI_RANK")) == "1":
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.05)
    finally:
        err = _stderr_after_a_stopped_launch(proc, stopped)
    assert stopped and proc.returncode != 0
    assert "Timeout" in err  # faulthandler: where the rank left waiting was, before it exited


def _stderr_after_a_stopped_launch(proc: subprocess.Popen, stopped: list[int]) -> str:
    """The job's stderr. The running rank exits by itself (max(--watchdog, start-up floor)
    s); a rank stopped before it reached the launcher's PMIx server can leave Open MPI's
    prterun waiting, which no rank can end (README, Guarantees), so after 30 s the job is
    killed, as a batch system's time limit would. Nothing outlives the test."""
    try:
        return proc.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate(timeout=30)[1]
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_slow_point_is_not_a_stuck_one():
    """Each call returns well within the watchdog; the whole point takes longer."""
    proc = commbench(4, "allreduce", "--impl", "ring", "-b", "4M", "-e", "4M", "-n", "100",
                     "-w", "1", "--watchdog", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def _env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(
        item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
    )


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses /proc and POSIX signals")
