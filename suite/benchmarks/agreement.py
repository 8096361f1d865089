"""Agreement check: commbench's ``mpi`` all-reduce and all-to-all against the OSU
micro-benchmarks, measured side by side in this run on this machine.

Run: ``python -m commbench.benchmarks.agreement`` (part of ``make bench``). The OSU binaries
come from the ``osu`` site value of the ``local`` system (``$COMMBENCH_OSU``, or ``osu =
"DIR"`` under ``[local]`` in the site file); nothing is downloaded. Without it the bench
prints one "not configured" line. With it: ``NP`` ranks (``$NP``, default 8) run
``osu_allreduce`` (float32, 64 KiB-1 MiB) and ``osu_alltoall`` (8-32 KiB per peer), then
``commbench run ... --impl mpi`` at the same bytes per rank and iterations, and it prints
commbench / OSU per size (1.00 = agree; the machine's load shows in both).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from commbench.harness.results import RecordWriter
from commbench.jobs import external
from commbench.jobs.profile import load_profile
from commbench.jobs.site import apply_site_file, placeholders, read_site_file, resolve_site
from commbench.launch import find_mpiexec, local_env

ITERS, WARMUP = 200, 20
#: collective, OSU binary, OSU sizes (per peer for all-to-all), dtype
CASES = (
    ("allreduce", "osu_allreduce", (64 << 10, 1 << 20), "float32"),
    ("alltoall", "osu_alltoall", (8 << 10, 32 << 10), None),
)


def osu_folder() -> str:
    profile = load_profile("local")
    _, table = read_site_file(None, os.environ)
    _, file_values = apply_site_file(profile, table.get("local", {}), "site file")
    places = placeholders(Path(sys.executable).parent)
    return resolve_site(profile, {}, os.environ, file_values, 1, places)["osu"]


def run(cmd: list[str], log: Path) -> None:
    env = dict(local_env(), COMMBENCH_RUN_ID="agreement")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"agreement: {' '.join(cmd[:4])} ... exit status {proc.returncode} (log {log})")


def main() -> int:
    folder = osu_folder()
    if not folder:
        print(
            'agreement: OSU not configured (set COMMBENCH_OSU=DIR or osu = "DIR" under '
            "[local] in the site file): skipped"
        )
        return 0
    from commbench.analysis.load import load_all
    from commbench.analysis.tables import agreement_table

    np_ = int(os.environ.get("NP", "8"))
    mpiexec = find_mpiexec() or "mpiexec"
    with tempfile.TemporaryDirectory(prefix="commbench-agreement-") as tmp:
        out = Path(tmp) / "results.jsonl"
        writer = RecordWriter(out)
        context = {"system": "local", "run_id": "agreement", "nranks": np_, "backend": "cpu"}
        for coll, binary, (lo, hi), dtype in CASES:
            cmd = external.external_command(
                "osu",
                binary,
                min_size=lo,
                max_size=hi,
                factor=2,
                iters=ITERS,
                warmup=WARMUP,
                check=0,
                dtype=dtype,
                backend="cpu",
            )
            log = Path(tmp) / f"{binary}.log"
            run([mpiexec, "-n", str(np_), str(Path(folder) / binary), *cmd.args], log)
            for record in external.parse_osu(log.read_text(), str(log), context):
                writer.write(record)
            scale = np_ if coll == "alltoall" else 1
            ours = [mpiexec, "-n", str(np_), sys.executable, "-m", "commbench", "run", coll]
            ours += ["--impl", "mpi", "-b", str(lo * scale), "-e", str(hi * scale), "-f", "2"]
            ours += ["-n", str(ITERS), "-w", str(WARMUP), "-c", "0", "--system", "local"]
            ours += ["--out", str(out)] + (["-d", dtype] if dtype else [])
            run(ours, Path(tmp) / f"commbench-{coll}.log")
        points, _ = load_all(out)
        for row in agreement_table(points).itertuples():
            print(
                f"agreement: {row.collective} {row.size_bytes} B x {row.nranks} ranks: "
                f"commbench mpi {row.commbench_us:.1f} us, {row.external} "
                f"{row.external_us:.1f} us, ratio {row.ratio:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
