"""Test-only: several ``commbench run`` invocations in one MPI job, one after the other,
each through the CLI's own entry point (:func:`commbench.cli.main`), where the test files
would otherwise start one ``mpiexec`` each (8 ranks start slowly on a small machine).

    mpiexec -n 8 python tests/scripts/driver_runs.py RUNS.json

``RUNS.json`` maps a label to the arguments of one ``commbench run`` (without ``run``), in
the order to run them, or to ``--script PATH ARGS...``: a test program run as
``python PATH ARGS...`` would run it (its exit status is the run's). Rank 0 prints ``=== RUN label`` before each run and
``=== END label 0 SECONDS`` after it, so a test reads each run's table from stdout
(:class:`tests.mpirun.DriverRuns`). Each run gets its own run id, as its own launch would.
A run that fails on a rank aborts the whole job, as ``commbench run`` does, with that
rank's message on stderr; one that hangs, after ``--watchdog 100`` (unless it sets its
own), with the watchdog's report; a rank whose run returns a non-zero exit status prints
``=== END label STATUS SECONDS`` and ends the job, as mpiexec does when a rank exits so.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time

from commbench.cli import main as commbench
from commbench.harness.results import RecordWriter, new_run_id

START, END = "=== RUN ", "=== END "
#: A run that hangs ends the job with the watchdog's report well before the test's own
#: time limit (a run's own --watchdog wins).
WATCHDOG_S = 100


def create_records_files(out: str) -> None:
    """The records file and its raw (and timeline) side files, empty if new, before the ranks start a run.

    Every rank checks ``--out`` before MPI starts (``results.check_output_path``): a rank
    that does not find the file creates it to test the folder, then removes it; when the
    ranks check at the same instant, another rank can see the file and lose it between
    two looks, and stop with "No such file" while the others wait for it in MPI. Ranks
    started by mpiexec reach that check at different times; ranks that finished the
    previous run together reach it at once, so here the files exist before they look.
    """
    writer = RecordWriter(out)
    for path in (writer.path, writer.raw_path, writer.timeline_path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def run_script(path: str, args: list[str]) -> int:
    """The program ``path`` with ``args``, as ``python path args...`` runs it; its exit
    status (an exception ends this rank, and so the job, as it would end that program)."""
    saved, sys.argv = sys.argv, [path, *args]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        sys.argv = saved
    return 0


def main(path: str) -> int:
    runs: dict[str, list[str]] = json.loads(open(path).read())
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    given = os.environ.get("COMMBENCH_RUN_ID")
    for index, (label, argv) in enumerate(runs.items()):
        if world.rank == 0 and "--out" in argv:
            create_records_files(argv[argv.index("--out") + 1])
        run_id = world.bcast(f"{given or new_run_id()}-{index}" if world.rank == 0 else None)
        os.environ["COMMBENCH_RUN_ID"] = run_id
        if world.rank == 0:
            print(f"{START}{label}", flush=True)
        t0 = time.perf_counter()
        if argv[0] == "--script":
            status = run_script(argv[1], argv[2:])
        else:
            status = commbench(["run", "--watchdog", str(WATCHDOG_S), *argv])
        sys.stdout.flush()
        if status:  # as a rank of its own launch exiting non-zero: the job ends
            print(f"{END}{label} {status} {time.perf_counter() - t0:.2f}", flush=True)
            world.Abort(status)
        world.Barrier()
        if world.rank == 0:
            print(f"{END}{label} 0 {time.perf_counter() - t0:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
