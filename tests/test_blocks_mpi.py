"""All-gather, reduce-scatter and broadcast under mpiexec: every CPU implementation byte
for byte against MPI_Allgather / MPI_Reduce_scatter_block / MPI_Bcast on 2-8 ranks
(tests/scripts/blocks_mpi_check.py), ``commbench run`` in and out of place with the
harness's own check, records that say which, and the refusals."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.mpirun import run_mpi

SIZES = ["-b", "1000", "-e", "64K", "-f", "8", "-n", "2", "-w", "1"]
#: (label -> (ranks, ARGS)): run in the shared 8-rank job (the ``driver_runs`` fixture)
DRIVER_RUNS = {
    "blocks-vs-mpi": (8, ["--script", "tests/scripts/blocks_mpi_check.py", "8"]),
    **{f"blocks/{coll}/{impl}": (8, [
        coll, "--impl", impl, "--gpus-per-node", "4", *SIZES, *extra, "--inplace", "both",
        "--out", f"{{tmp}}/blocks-{coll}-{impl}.jsonl"])
       for coll, impl, extra in (
           ("allgather", "mpi", []),
           ("allgather", "recursive-doubling", ["-d", "bf16"]),
           ("reducescatter", "mpi", ["-d", "bf16", "-o", "max"]),
           ("reducescatter", "ring", ["-d", "int32", "-o", "prod"]),
           ("broadcast", "mpi", ["-r", "5"]),
           ("broadcast", "tree", ["-r", "3", "--param", "chunk_bytes=4000"]),
           ("allreduce", "mpi", []),
       )},
}  # fmt: skip


def test_every_cpu_implementation_is_byte_exact_against_mpi(driver_runs):
    out = driver_runs.stdout("blocks-vs-mpi")
    result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    assert result["problems"] == []
    assert result["cases"] >= 7 * 8 * 6  # 2..8 ranks x examples x (collectives x impls)


@pytest.mark.parametrize("label", [k for k in DRIVER_RUNS if k.startswith("blocks/")])
def test_in_and_out_of_place_side_by_side(driver_runs, label):
    _, coll, impl = label.split("/")
    stdout = driver_runs.stdout(label)
    df = pd.read_json(driver_runs.tmp / f"blocks-{coll}-{impl}.jsonl", lines=True)
    assert (df.nwrong == 0).all() and len(df) == 2 * 3
    assert sorted(df.inplace) == [0, 0, 0, 1, 1, 1]
    header = next(x for x in stdout.splitlines() if "out-of-place" in x)
    assert header.index("out-of-place") < header.index("in-place")
    rows = [x.split() for x in stdout.splitlines() if x.strip() and not x.startswith("#")]
    # size count type redop [root], then per placement: time algbw busbw #wrong [lo, hi] n
    assert len(rows) == 3 and all(len(r) == (19 if coll == "broadcast" else 18) for r in rows)
    if coll == "allgather":  # nccl-tests' size: the gathered buffer, floored to rank blocks
        item = 2 if "bf16" in DRIVER_RUNS[label][1] else 4
        assert list(df[df.inplace == 0]["count"]) == [s // 8 // item for s in (1000, 8000, 64000)]
        assert list(df.busbw_GBps) == pytest.approx(list(df.algbw_GBps * 7 / 8))
    if coll == "broadcast":
        assert (df.root == int(DRIVER_RUNS[label][1][DRIVER_RUNS[label][1].index("-r") + 1])).all()
        assert (df.busbw_factor == 1.0).all()


def test_power_of_two_algorithm_refused_on_three_ranks_in_one_line():
    proc = run_mpi(3, ["-m", "commbench", "run", "reducescatter", "--impl", "recursive-halving",
                       "-b", "1K", "-e", "1K"], timeout=60)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == (
        "commbench run: error: implementation 'recursive-halving' (reducescatter) needs a "
        "power-of-two number of ranks, not 3: start 2, 4, 8, ... ranks or use --impl ring"
    )
    assert sum("needs a power-of-two" in x for x in lines) == 1
