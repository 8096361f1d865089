"""A plain (non-editable) install works anywhere: the wheel built from this tree, installed
into a fresh venv, runs from a temporary directory with no access to the source tree.

The fresh venv takes commbench's dependencies from the test's own environment (a ``.pth``
line naming its site-packages; ``.pth`` files there, such as an editable install's finder,
are not processed), so the only commbench it can import is the wheel's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("h200", "local", "local-cluster", "mi300x", "perlmutter", "vista")
EXPERIMENTS = ("nvrar-paper", "fast-paper", "interconnect")
#: what the wheel must not carry beside commbench: the repository's folders as packages
SOURCE_FOLDERS = ("suite", "kernels", "analysis", "jobs", "results", "tests", "tools")


def _copy_tree(dest: Path) -> Path:
    """The source tree without build outputs or results, so the wheel holds nothing stale."""
    generic = shutil.ignore_patterns(".git", ".venv*", ".gpu-*", "build", "dist", "*.egg-info",
                                     "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis")  # fmt: skip

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = set(generic(folder, names))
        if Path(folder) == ROOT / "results":
            skip |= {n for n in names if n not in ("reference", "README.md")}
        return skip

    return Path(shutil.copytree(ROOT, dest, ignore=ignore))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("install")
    src = _copy_tree(base / "src")
    wheels = base / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(src)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("commbench-*.whl")
    shutil.rmtree(src)  # from here on there is no source tree to fall back on
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "_commbench_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    work = base / "work"
    work.mkdir()
    return {"wheel": wheel, "python": python, "bin": venv / "bin", "work": work}


def _run(env: dict, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(env["bin"] / "commbench"), *argv],
        cwd=env["work"], capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"commbench {' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done


def test_wheel_holds_one_package_and_its_data(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"commbench"}
    for data in ("commbench/jobs/data/systems/perlmutter.toml", "commbench/jobs/data/experiments.toml",
                 "commbench/jobs/data/templates/_job.sh.j2", "commbench/jobs/data/emulated/h200.toml",
                 "commbench/jobs/data/rank-status.sh", "commbench/analysis/reference/nvrar.csv",
                 "commbench/analysis/reference/model-validation.md",
                 "commbench/harness/data/moe-megatron-4x8.txt.gz",
                 "commbench/kernels/nvrar/tuning_cpu.json", "commbench/analysis/nvrar_latency.ipynb"):  # fmt: skip
        assert data in names
    sources = [p for d in ("suite", "kernels", "analysis") for p in (ROOT / d).rglob("*.py")]
    sources += [ROOT / "jobs" / "__init__.py", ROOT / "results" / "reference" / "__init__.py"]
    assert len([n for n in names if n.endswith(".py")]) == len(sources)  # every module ships


@pytest.mark.parametrize("name", SOURCE_FOLDERS)
def test_no_generic_top_level_package(installed, name):
    done = subprocess.run([str(installed["python"]), "-c", f"import {name}"],
                          cwd=installed["work"], capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and "No module named" in done.stderr


def test_jobs_list_and_render(installed):
    out = _run(installed, "jobs", "list").stdout
    for name in (*SYSTEMS, *EXPERIMENTS):
        assert f"\n  {name} " in out
    required = {"perlmutter": ["account=a"], "vista": [], "h200": ["ib_hca=mlx5_0"],
                "mi300x": ["ib_hca=mlx5_0"]}  # fmt: skip
    for system, values in required.items():
        sets = [w for v in values for w in ("--set", v)]
        job = _run(installed, "jobs", "render", "--system", system, "--nodes", "2",
                   "--experiment", "interconnect", "--run-id", "t", *sets).stdout  # fmt: skip
        script = installed["work"] / "results" / system / "t" / "job.sh"
        assert str(script) in job and "-m commbench run" in script.read_text()


def test_simulate_report_and_scorecard(installed):
    out = installed["work"] / "model"
    _run(installed, "simulate", "allreduce", "--system", "perlmutter", "--nodes", "2,4",
         "-b", "64K", "-e", "256K", "--out", str(out / "ar.jsonl"))  # fmt: skip
    _run(installed, "simulate", "alltoallv", "--system", "h200", "--servers", "2",
         "--workload", "zipf:0.8", "--size", "1M", "--impls", "fanout,spreadout", "--no-tune",
         "--out", str(out / "a2a.jsonl"))  # fmt: skip
    _run(installed, "report", str(out), "-o", str(out / "report.html"))
    html = (out / "report.html").read_text()
    assert "Singhania et al. 2026" in html  # the papers' reference numbers
    assert "NVRAR vs NCCL, Perlmutter" in html  # the model-validation headlines


def test_cluster_profile_trace_and_run(installed):
    probe = ("from commbench.cluster.profiles import load_emulated_profile; "
             "print(load_emulated_profile('h200').name)")  # fmt: skip
    done = subprocess.run([str(installed["python"]), "-c", probe], cwd=installed["work"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "h200"
    # the shipped trace by name (its native 32 ranks), then a measured run on 2 ranks
    matrix = installed["work"] / "trace.txt"
    _run(installed, "workload", "trace:moe-megatron-4x8", "--ranks", "32", "-o", str(matrix))
    assert len(matrix.read_text().split()) >= 32 * 32
    from commbench.launch import find_mpiexec, local_env

    out = installed["work"] / "run.jsonl"
    cmd = [find_mpiexec(), "-n", "2", str(installed["python"]), "-m", "commbench", "run",
           "alltoallv", "--impl", "fanout", "--gpus-per-node", "1", "-b", "64K", "-e", "64K",
           "-n", "2", "-w", "1", "--workload", "zipf:0.8", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, cwd=installed["work"], env=local_env(), capture_output=True,
                          text=True, timeout=120, start_new_session=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"impl": "fanout"' in out.read_text()
