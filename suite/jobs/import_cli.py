"""``commbench import nccl-tests|rccl-tests|osu FILE... --out RESULTS``.

Reads the text output of the external baselines (:mod:`commbench.jobs.external`) and appends one
commbench record per size to ``RESULTS``, so ``load_all``, the figures and the report put
them beside commbench's own. Every file is parsed before anything is written: a bad file
is one line naming ``FILE:LINE`` and nothing is appended.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from commbench.errors import UsageError
from commbench.harness import results
from commbench.jobs import external


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import",
        help="import nccl-tests / rccl-tests / OSU output as commbench records",
        description="Parse the text output of nccl-tests, rccl-tests or the OSU "
        "micro-benchmarks into commbench records (impl nccl-tests:all_reduce, "
        "osu:osu_allreduce, ...) appended to --out.",
    )
    p.add_argument("tool", choices=external.TOOLS)
    p.add_argument("files", nargs="+", metavar="FILE", help="captured output (stdout)")
    p.add_argument("--out", required=True, metavar="RESULTS", help="results file (JSONL)")
    p.add_argument(
        "--binary",
        help="which binary wrote the files (default: as the output says, or inferred)",
    )
    p.add_argument("--nranks", type=int, help="ranks of the run (OSU does not print it)")
    p.add_argument("--nodes", type=int)
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--backend", choices=("cpu", "cuda", "rocm"))
    p.add_argument("--system", help="default: $COMMBENCH_SYSTEM, else 'unknown'")
    p.add_argument("--run-id", help="default: $COMMBENCH_RUN_ID")
    p.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    if args.nranks is not None and args.nranks < 1:
        raise UsageError(f"--nranks {args.nranks}: give a positive number of ranks")
    results.check_output_path(args.out, "--out")
    context = {
        "system": args.system or os.environ.get("COMMBENCH_SYSTEM") or "unknown",
        "run_id": args.run_id or os.environ.get("COMMBENCH_RUN_ID"),
        "timestamp": results.timestamp(),
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "backend": args.backend,
        "nranks": args.nranks,
        "binary": args.binary,
    }
    records = []
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"{name}: no such file")
        text = path.read_text(encoding="utf-8", errors="replace")
        records += external.parse_output(args.tool, text, str(path), context)
    writer = results.RecordWriter(args.out)
    writer.repair()
    for record in records:
        writer.write(record)
    print(
        f"commbench import: {len(records)} record(s) from {len(args.files)} file(s) -> {args.out}"
    )
    return 0
