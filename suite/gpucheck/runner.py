"""Running the one-GPU check's checks: each in its own process (tree) with a timeout, the
four outcomes, the time budget, and what is written to the output folder.

A check ends ``ok``, ``failed`` (with the reason: an exception, a crash, a timeout, a hang
after its result), ``not applicable`` (with the reason) or ``not run`` (the budget was
spent before it could start, or the whole run was stopped first). ``summary.txt`` and
``summary.json`` name every check from the start and are rewritten, whole, after each one;
the run files and each check's full output live in a work folder that is packed into
``runs.tar.gz`` after each check, so the output folder never holds more than a handful of
files (a GPU machine sends back at most 8).
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from commbench.errors import NotApplicable
from commbench.launch import find_mpiexec, local_env, terminate

OK, FAILED, NOT_APPLICABLE, NOT_RUN = "ok", "failed", "not applicable", "not run"
STATUSES = (OK, FAILED, NOT_APPLICABLE, NOT_RUN)
#: A check is not started with less than this left of the budget.
MIN_START_S = 5.0
#: What each check still to come is kept of the budget (a concurrent phase: PHASE_RESERVE_S),
#: so that a hang early on cannot starve the checks after it.
RESERVE_S = 15.0
PHASE_RESERVE_S = 40.0
#: A worker that wrote its result is ended this long after (a hang in MPI_Finalize or
#: nvshmem_finalize must not cost the check's whole timeout).
RESULT_GRACE_S = 10.0
#: After SIGTERM, this long before SIGKILL.
TERM_GRACE_S = 3.0
#: Open MPI transports that work inside a sandbox such as gVisor (the GPU machine's): no
#: UCX, and no shared-memory single copy (CMA and xpmem need system calls a sandbox may
#: refuse): ranks of the one machine talk TCP over loopback. Values already set win; the
#: records' ``env`` shows them.
SANDBOX_MPI_ENV = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,tcp",
                   "OMPI_MCA_btl_tcp_if_include": "lo"}  # fmt: skip


@dataclass(frozen=True)
class Check:
    """One check: a function (``module:name`` called with ``args``, in a worker process on
    ``ranks`` ranks) or a command (``argv``, passes when it exits 0); ``skip`` makes it not
    applicable; ``note`` says what it does not show."""

    name: str
    timeout_s: float
    func: str | None = None
    args: tuple = ()
    argv: tuple[str, ...] = ()
    ranks: int = 1
    skip: str | None = None
    concurrent: bool = False  # may run next to the concurrent checks beside it in the list
    needs: str | None = None  # the check whose output it loads: --only keeps that one too
    note: str | None = None


@dataclass
class Result:
    name: str
    status: str
    seconds: float = 0.0
    error: str | None = None
    details: dict = field(default_factory=dict)
    note: str | None = None


def check_env() -> dict[str, str]:
    """The environment of every check's process."""
    env = local_env()
    for key, value in SANDBOX_MPI_ENV.items():
        env.setdefault(key, value)
    return env


# ---------------------------------------------------------------- in the worker


def run_worker(func: str, result_path: str, ranks: int = 1, args: Sequence = ()) -> int:
    """In the worker process: run ``func(*args)`` and write its result (rank 0 of
    ``ranks``, with every rank's outcome)."""
    # A check stopped at its timeout leaves every thread's Python stack on stderr, even one
    # stuck in a C call (a CUDA or NCCL wait): the log says where it hung.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    module, name = func.split(":")
    t0 = time.perf_counter()
    try:
        details = getattr(importlib.import_module(module), name)(*args) or {}
        status, error = OK, None
    except NotApplicable as exc:
        details, status, error = {}, NOT_APPLICABLE, str(exc)
    except BaseException as exc:  # recorded, not raised: the parent reads the file
        details, status, error = {"trace": traceback.format_exc()}, FAILED, repr(exc)
    result = {"status": status, "error": error, "details": details}
    if ranks > 1:
        from mpi4py import MPI

        result = merge_ranks(MPI.COMM_WORLD.gather(result))
    if result is not None:  # written whole, then renamed: the parent never reads half
        result["seconds"] = time.perf_counter() - t0
        tmp = Path(f"{result_path}.tmp")
        tmp.write_text(json.dumps(result, default=str))
        tmp.replace(result_path)
    return 0


def merge_ranks(results: list[dict] | None) -> dict | None:
    """Rank 0's view of every rank's result: the worst status wins."""
    if results is None:
        return None
    for status in (FAILED, NOT_APPLICABLE):
        bad = [(r, res) for r, res in enumerate(results) if res["status"] == status]
        if bad:
            rank, res = bad[0]
            return {**res, "error": f"rank {rank}: {res['error']}"}
    return {"status": OK, "error": None, "details": {f"rank {r}": res["details"]
                                                     for r, res in enumerate(results)}}  # fmt: skip


# ---------------------------------------------------------------- processes


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process this one can see."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return table


def process_tree(leader: int) -> list[int]:
    """``leader`` (a session leader) and every process of its session or below it."""
    table = _proc_table()
    found = {pid for pid, (_, sid) in table.items() if sid == leader}
    found.add(leader)
    grew = True
    while grew:  # children that left the session (setsid) are still below it
        below = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
        found |= below
        grew = bool(below)
    return sorted(found)


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGTERM the process's whole tree (mpiexec and its ranks: a rank killed with its
    launcher's group alone can stay and hold the GPU), then SIGKILL what is left."""
    first = set(process_tree(proc.pid))

    def live() -> list[int]:  # the leader is reaped by poll(); its session names the rest
        return [p for p in first | set(process_tree(proc.pid)) if _alive(p)]

    terminate(live, TERM_GRACE_S, poll_s=0.05, reap=proc.poll)
    proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_process(argv: Sequence[str], timeout_s: float, result_file: Path | None = None,
                log: Path | None = None) -> tuple[int | None, str, str, str]:  # fmt: skip
    """(exit status or None when stopped, stdout, stderr, how it ended). The process tree is
    stopped at ``timeout_s``, or RESULT_GRACE_S after ``result_file`` appears."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=check_env(),
                                start_new_session=True)  # fmt: skip
        t0 = time.monotonic()
        deadline, result_at, stopped = t0 + timeout_s, None, False
        while proc.poll() is None:
            now = time.monotonic()
            if result_file is not None and result_at is None and result_file.exists():
                result_at, deadline = now, min(deadline, now + RESULT_GRACE_S)
            if now >= deadline:
                stop_tree(proc)
                stopped = True
                break
            time.sleep(0.05)
        if stopped:
            code, how = None, "hung after its result" if result_at is not None else "timed out"
        else:
            code, how = proc.returncode, "exited"
            if [p for p in process_tree(proc.pid) if p != proc.pid and _alive(p)]:
                stop_tree(proc)  # ranks or helpers the launcher left behind
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(argv)}\n# {how}, exit status {code}, "
                       f"{time.monotonic() - t0:.1f} s\n--- stdout\n{stdout[-200_000:]}"
                       f"\n--- stderr\n{stderr[-200_000:]}\n")  # fmt: skip
    return code, stdout, stderr, how


def run_check(check: Check, timeout_s: float, log_dir: Path | None = None) -> Result:
    """Run one check in its own process(es); never raises, never waits past the timeout
    (plus the moments it takes to stop a process tree)."""
    if check.skip:
        return Result(check.name, NOT_APPLICABLE, error=check.skip, note=check.note)
    t0 = time.perf_counter()
    log = log_dir / f"{_file_name(check.name)}.txt" if log_dir else None
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        if check.func:
            argv = [sys.executable, "-m", "commbench.gpucheck", "--worker", check.func,
                    "--result", str(result_file), "--ranks", str(check.ranks),
                    "--args", json.dumps(list(check.args))]  # fmt: skip
            if check.ranks > 1:
                launcher = find_mpiexec()
                if launcher is None:
                    return Result(check.name, FAILED, error="no mpiexec: the wheel set's Open "
                                  "MPI is missing, or put one on PATH", note=check.note)  # fmt: skip
                argv = [launcher, "-n", str(check.ranks), *argv]
        else:
            argv = list(check.argv)
        code, stdout, stderr, how = run_process(
            argv, timeout_s, result_file if check.func else None, log
        )
        seconds = time.perf_counter() - t0
        found = json.loads(result_file.read_text()) if result_file.exists() else None
    res = _judge(check, found, code, how, timeout_s, stdout, stderr)
    res.seconds, res.note = seconds, check.note
    return res


def _judge(check, found, code, how, timeout_s, stdout, stderr) -> Result:
    tail = {"stderr": stderr[-2000:]}
    if found is not None:  # the worker finished the check (it may still hang or fail at exit)
        res = Result(check.name, found["status"], error=found["error"], details=found["details"])
        if code != 0 and res.status == OK:
            ended = (f"did not exit within {RESULT_GRACE_S:g} s (stopped)" if code is None
                     else f"exited with {code}")  # fmt: skip
            res.status, res.error = FAILED, f"the check passed, then the process {ended}"
            res.details.update(tail)
        return res
    if code is None:
        where = hung_at(stderr)
        return Result(check.name, FAILED, error=f"timed out after {round(timeout_s, 1):g} s "
                      f"(stopped){f' in {where}' if where else ''}", details=tail)  # fmt: skip
    if check.func:
        return Result(check.name, FAILED, error=f"exit status {code} with no result "
                      f"(crashed): {_last_line(stderr)}", details=tail)  # fmt: skip
    details = {"stdout": stdout.splitlines()[-12:], **tail}
    if code != 0:
        return Result(check.name, FAILED, error=f"exit status {code}: {_last_line(stderr)}",
                      details=details)  # fmt: skip
    return Result(check.name, OK, details=details)


def hung_at(stderr: str) -> str | None:
    """``function (file:line)``, the innermost frame of the worker's main thread in the
    stack dump a stopped worker leaves (``faulthandler``; the thread that runs
    :func:`run_worker`), or None where there is none."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", stderr):
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)
        if any(name == "run_worker" for _, _, name in frames):
            path, line, name = frames[0]
            return f"{name} ({'/'.join(Path(path).parts[-2:])}:{line})"
    return None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "(no output)"


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", name).strip("-")


# ---------------------------------------------------------------- the output folder


def write_summary(out_dir: Path, checks: Sequence[Check], results: dict[str, Result],
                  meta: dict) -> None:  # fmt: skip
    """``summary.json`` and ``summary.txt`` in ``out_dir``, naming every check (those not
    yet run as ``not run``), replaced whole (never torn)."""
    rows = [results.get(c.name) or Result(c.name, NOT_RUN, error="pending: the run ended "
                                          "before it", note=c.note) for c in checks]  # fmt: skip
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    doc = {**meta, "counts": counts, "checks": [vars(r) for r in rows]}
    lines = ["# commbench gpu-check: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)]
    lines += [f"# {k}: {v}" for k, v in meta.items()]
    for r in rows:
        note = f"  {r.error}" if r.error else ""
        lines.append(f"{r.status:15s} {r.seconds:6.1f}s  {r.name}{note}")
        if r.note:
            lines.append(f"{'':24s}note: {r.note}")
    for name, text in (("summary.json", json.dumps(doc, indent=2, default=str)),
                       ("summary.txt", "\n".join(lines) + "\n")):  # fmt: skip
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out_dir / name)


def pack(work: Path, archive: Path) -> None:
    """``work`` (run files, each check's output) as one ``.tar.gz``, replaced whole."""
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(work)))
    tmp.replace(archive)


def _phases(checks: Sequence[Check]) -> Iterator[list[Check]]:
    """The checks in list order: each serial check alone, runs of concurrent ones together."""
    group: list[Check] = []
    for check in checks:
        if check.concurrent:
            group.append(check)
            continue
        if group:
            yield group
            group = []
        yield [check]
    if group:
        yield group


def _reserve(phases: list[list[Check]]) -> float:
    total = 0.0
    for phase in phases:
        live = [c for c in phase if c.skip is None]
        if live:
            total += PHASE_RESERVE_S if phase[0].concurrent else min(RESERVE_S, live[0].timeout_s)
    return total


def run_all(
    checks: Sequence[Check],
    out_dir: Path,
    budget_s: float,
    jobs: int = 4,
    meta: dict | None = None,
    echo: Callable[[str], None] = print,
    work: Path | None = None,
) -> list[Result]:
    """Every check in list order (a run of concurrent checks ``jobs`` at a time); each
    timeout is cut to the budget left less what the checks after it are kept; the summary
    (and ``runs.tar.gz`` of ``work``) is rewritten after each check."""
    deadline = time.monotonic() + budget_s
    meta = {"budget_s": budget_s, **(meta or {})}
    results: dict[str, Result] = {}
    lock = threading.Lock()
    logs = work / "logs" if work else None
    write_summary(out_dir, checks, results, meta)

    def one(check: Check, reserved: float) -> Result:
        left = deadline - time.monotonic()
        if check.skip is None and left < MIN_START_S:
            res = Result(check.name, NOT_RUN, error=f"the time budget ({budget_s:g} s) was "
                         "spent before it could start", note=check.note)  # fmt: skip
        else:
            timeout = min(check.timeout_s, left, max(left - reserved, MIN_START_S))
            res = run_check(check, max(1.0, timeout), logs)
        with lock:
            results[check.name] = res
            if work is not None and work.is_dir():
                pack(work, out_dir / "runs.tar.gz")
            write_summary(out_dir, checks, results, meta)
            echo(f"{res.status:15s} {res.seconds:6.1f}s  {check.name}"
                 + (f"  {res.error}" if res.error else ""))  # fmt: skip
        return res

    phases = list(_phases(checks))
    for i, phase in enumerate(phases):
        reserved = _reserve(phases[i + 1 :])
        if len(phase) == 1 and not phase[0].concurrent:
            one(phase[0], reserved)
            continue
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(lambda c, r=reserved: one(c, r), phase))
    meta["seconds"] = round(budget_s - (deadline - time.monotonic()), 1)
    write_summary(out_dir, checks, results, meta)
    return [results[c.name] for c in checks]
