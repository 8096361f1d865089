"""``commbench jobs list|show|render|submit|status``: Slurm jobs from system profiles, and
``commbench import nccl-tests|rccl-tests|osu FILE... --out RESULTS``: the external
baselines' output as commbench records (every file is parsed before anything is written).

The logic is in the modules of :mod:`commbench.jobs` (profile, site, allocation, experiments,
script, runs); this module parses flags, reads the environment and the site file, writes
scripts and talks to ``sbatch``, ``squeue`` and ``sacct``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from commbench.errors import UsageError
from commbench.harness import results
from commbench.jobs import external
from commbench.jobs.allocation import compute_allocation, parse_nodes
from commbench.jobs.experiments import (
    custom_experiment,
    load_experiment,
    load_experiments,
    registered_implementations,
)
from commbench.jobs.profile import Profile, environ_name, load_profile, system_names
from commbench.jobs.runs import SCRIPT_NAME, check_run_id, new_run_id, read_run_state, scan_runs
from commbench.jobs.script import Job, render_job, write_job
from commbench.jobs.site import (
    DEFAULT_SITE_FILE,
    apply_site_file,
    placeholders,
    read_site_file,
    resolve_site,
)
from commbench.jobs.syntax import format_walltime, parse_walltime
from commbench.kernels.registry import BACKENDS
from commbench.units import format_size, parse_size


def _add_jobs_parser(sub) -> None:
    p = sub.add_parser(
        "jobs",
        help="render and submit Slurm jobs for a system profile (jobs/systems/)",
        description="Slurm jobs from system profiles (jobs/systems/*.toml) and named "
        "experiments (jobs/experiments.toml). Example: commbench jobs submit --system local "
        "--nodes 1 --experiment interconnect",
    )
    jsub = p.add_subparsers(dest="jobs_command", metavar="ACTION")
    jsub.required = True

    ls = jsub.add_parser("list", help="systems and experiments")
    ls.set_defaults(func=cmd_list)

    show = jsub.add_parser("show", help="one system profile, with its site values")
    show.add_argument("system")
    show.add_argument("--site-file", type=Path, help="site override file (see jobs/README.md)")
    show.set_defaults(func=cmd_show)

    for name, func, text in (
        ("render", cmd_render, "write the batch script(s) without submitting"),
        ("submit", cmd_submit, "render, then sbatch; prints the job ids"),
    ):
        r = jsub.add_parser(name, help=text, description=text)
        _add_render_options(r)
        if name == "submit":
            r.add_argument(
                "--test-only",
                action="store_true",
                help="ask sbatch to validate the script (sbatch --test-only), submit nothing",
            )
        r.set_defaults(func=func)

    st = jsub.add_parser("status", help="queue state and sentinels of rendered jobs")
    st.add_argument("run", nargs="?", help="a run id or run directory (default: all runs)")
    st.add_argument("-o", "--results", type=Path, help="results root (default: ./results)")
    st.set_defaults(func=cmd_status)


def _add_render_options(r: argparse.ArgumentParser) -> None:
    r.add_argument("--system", required=True, help="profile name (commbench jobs list)")
    r.add_argument("--nodes", required=True, help="node count, or a list (2,4,8: one job each)")
    r.add_argument("--experiment", help="named experiment (commbench jobs list)")
    r.add_argument(
        "-o",
        "--results",
        type=Path,
        help="results root (default: ./results); runs go to ROOT/SYSTEM/RUN_ID/",
    )
    r.add_argument(
        "-t", "--time", help="walltime (HH:MM:SS); default: the experiment's (x --repeat)"
    )
    r.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="K",
        help="run each implementation K times, interleaved (A B C A B C); a point's "
        "records merge into one interval (default 1)",
    )
    r.add_argument("--run-id", help="run id (default: EXPERIMENT-nNODES-TIMESTAMP-XXXX)")
    r.add_argument("--launcher", help="srun, ibrun or mpirun (default: the profile's)")
    r.add_argument("--tasks-per-node", type=int, help="ranks per node (default: one per GPU)")
    r.add_argument("--cpus-per-task", type=int, help="override the profile's -c")
    r.add_argument("--account", help="site value account (-A)")
    r.add_argument("--qos", help="site value qos (-q)")
    r.add_argument("--partition", help="site value partition (-p)")
    r.add_argument("--constraint", help="site value constraint (-C)")
    r.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any site value of the profile (commbench jobs show SYSTEM lists them)",
    )
    r.add_argument("--site-file", type=Path, help="site override file (see jobs/README.md)")
    r.add_argument(
        "--extra-sbatch",
        action="append",
        default=[],
        metavar="--OPTION=VALUE",
        help="one more #SBATCH option (repeatable; checked against the profile)",
    )
    g = r.add_argument_group("run options (instead of --experiment)")
    g.add_argument("--collective", help="allreduce, alltoall or alltoallv")
    g.add_argument("--impl", help="implementation(s), comma-separated")
    g.add_argument("-b", "--minbytes", default="1K")
    g.add_argument("-e", "--maxbytes", default="1M")
    g.add_argument("-f", "--stepfactor", type=int, default=2)
    g.add_argument("-n", "--iters", type=int, default=20)
    g.add_argument("-w", "--warmup-iters", type=int, default=5)
    g.add_argument("-c", "--check", type=int, default=1)
    g.add_argument("-d", "--datatype")
    g.add_argument("--workload", help="alltoallv traffic spec (a list sweeps it)")


# ---------------------------------------------------------------- list / show


def cmd_list(args: argparse.Namespace) -> int:
    print("systems (jobs/systems/):")
    for name in system_names():
        p = load_profile(name)
        dev = p.devices
        launchers = ",".join(sorted(p.launch.launchers))
        print(
            f"  {name:12s} {dev.backend:5s} {dev.gpus_per_node}x {dev.model:20s} "
            f"launchers {launchers:14s} {p.description}"
        )
    print("experiments (jobs/experiments.toml):")
    for name, exp in load_experiments().items():
        print(f"  {name:14s} {format_walltime(exp.walltime_s)}  {exp.description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    p = load_profile(args.system)
    site_path, site_data = read_site_file(args.site_file, os.environ)
    p, file_values = apply_site_file(p, site_data.get(p.name, {}), str(site_path))
    dev, res, limits = p.devices, p.resources, p.limits
    servers = dev.servers_per_node
    out = [
        f"{p.name}: {p.description}",
        f"  profile     {p.path}",
        f"  devices     {dev.gpus_per_node}x {dev.vendor} {dev.model}, backend {dev.backend}"
        + (f", {servers} emulated servers per node" if servers > 1 else ""),
        f"  nics        {p.nics.model}",
        f"  launchers   {', '.join(sorted(p.launch.launchers))} (default {p.launch.default})",
        f"  resources   -c {res.cpus_per_task or 'unset'}, GPUs via {res.gpu_option}, "
        f"exclusive {res.exclusive}",
        f"  forbidden   {', '.join('--' + o for o in res.forbidden) or 'none'}",
        f"  modules     {' '.join(p.run.modules) or 'none'}",
        f"  limits      max_nodes {limits.max_nodes}, max_walltime "
        + (format_walltime(limits.max_walltime_s) if limits.max_walltime_s else "none"),
    ]
    for kind, table in (("partition", limits.partition), ("qos", limits.qos)):
        for name, lim in table.items():
            wall = format_walltime(lim.max_walltime_s) if lim.max_walltime_s else "none"
            out.append(
                f"              {kind} {name}: max_nodes {lim.max_nodes}, max_walltime {wall}"
            )
    out.append("  env         " + " ".join(f"{k}={v}" for k, v in p.env.items()))
    if p.env_multinode:
        out.append("  multi-node  " + " ".join(f"{k}={v}" for k, v in p.env_multinode.items()))
    constants = p.fabric.model_dump(exclude={"sources"})
    out.append("  fabric      " + ", ".join(f"{k}={v}" for k, v in constants.items()))
    out.append(f"  site values (flag --set KEY=VALUE, env COMMBENCH_KEY, or {DEFAULT_SITE_FILE}):")
    for name, key in p.site_keys.items():
        env_value = os.environ.get(environ_name(name))
        source, value = (
            ("environment", env_value)
            if env_value
            else ("site file", file_values[name])
            if name in file_values
            else ("default", key.default)
        )
        need = "required" if key.required else "optional"
        if key.required and key.multinode_only:
            need = "required for multi-node"
        where = f"-> {key.env}" if key.env else ""
        out.append(f"    {name:14s} {need:24s} {source}: {value!r} {where}  {key.help}".rstrip())
    print("\n".join(out))
    return 0


# ---------------------------------------------------------------- render / submit


def _site_flags(args: argparse.Namespace) -> dict[str, str]:
    given = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--set {item!r}: write KEY=VALUE, e.g. --set account=m1234_g")
        given[key.strip()] = value
    for key in ("account", "qos", "partition", "constraint"):
        value = getattr(args, key)
        if value is not None:
            given[key] = value
    return given


def render_jobs(args: argparse.Namespace, environ=os.environ) -> list[Job]:
    """Every job the flags describe (one per node count), not yet written."""
    profile = load_profile(args.system)
    site_path, site_data = read_site_file(args.site_file, environ)
    unknown = sorted(set(site_data) - set(system_names()))
    if unknown:
        raise UsageError(
            f"{site_path}: [{unknown[0]}] is not a system ({', '.join(system_names())})"
        )
    profile, file_values = apply_site_file(profile, site_data.get(profile.name, {}), str(site_path))
    available = registered_implementations()
    if args.experiment and (args.collective or args.impl or args.workload or args.datatype):
        raise UsageError("give --experiment NAME or run options (--collective ...), not both")
    if args.experiment:
        experiment = load_experiment(args.experiment)
    elif args.collective:
        experiment = custom_experiment(
            args.collective,
            [s for s in (args.impl or "").split(",") if s],
            profile.devices.backend,
            available,
            walltime_s=parse_walltime(args.time or "00:30:00"),
            min=format_size(parse_size(args.minbytes)),
            max=format_size(parse_size(args.maxbytes)),
            factor=args.stepfactor,
            iters=args.iters,
            warmup=args.warmup_iters,
            check=args.check,
            dtype=args.datatype,
            workload=args.workload,
        )
    else:
        raise UsageError("give --experiment NAME (commbench jobs list) or --collective and --impl")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: give a count >= 1")
    walltime = parse_walltime(args.time) if args.time else experiment.walltime_s * args.repeat
    bindir = Path(sys.executable).parent
    results_root = (args.results or Path("results")).resolve()
    given = _site_flags(args)
    node_counts = parse_nodes(args.nodes)
    if args.run_id:
        check_run_id(args.run_id)
    out = []
    for nodes in node_counts:
        site = resolve_site(profile, given, environ, file_values, nodes, placeholders(bindir))
        alloc = compute_allocation(
            profile, nodes, walltime, args.tasks_per_node, args.cpus_per_task
        )
        if args.run_id:
            run_id = args.run_id if len(node_counts) == 1 else f"{args.run_id}-n{nodes}"
        else:
            run_id = new_run_id(experiment.name, nodes)
        out.append(
            render_job(
                profile,
                experiment,
                alloc,
                site,
                run_id=run_id,
                bindir=bindir,
                results_root=results_root,
                available=available,
                launcher=args.launcher,
                extra_sbatch=args.extra_sbatch,
                repeat=args.repeat,
            )
        )
    return out


def _write_all(rendered: list[Job]) -> list[Path]:
    paths = []
    for job in rendered:
        path = write_job(job)
        for line in job.skipped:
            print(f"commbench jobs: {job.run_id}: skipped {line}", file=sys.stderr)
        paths.append(path)
    return paths


def cmd_render(args: argparse.Namespace) -> int:
    rendered = render_jobs(args)
    for job, path in zip(rendered, _write_all(rendered), strict=True):
        a = job.allocation
        print(f"{path}  ({a.nodes} node(s) x {a.tasks_per_node} rank(s), {len(job.runs)} run(s))")
    return 0


def _need(program: str) -> str:
    found = shutil.which(program)
    if not found:
        raise UsageError(
            f"{program} not found: run on a Slurm login node, or start the local Slurm "
            "with `bash jobs/local-slurm.sh start` (needs apt-get install slurm-wlm munge)"
        )
    return found


def slurm_client(profile: Profile, nodes: int = 0) -> list[str]:
    """The words before a Slurm client command for ``profile``: nothing on a real
    cluster; on ``local-cluster``, entering the emulated cluster (refused in one line if
    it, or its Slurm, is not running, or has fewer than ``nodes`` nodes)."""
    if not profile.emulated_cluster:
        return []
    from commbench.cluster import slurm

    folder = slurm.cluster_folder()
    spec = slurm.check_running(folder)
    if nodes > spec.nodes:
        raise UsageError(
            f"{nodes} nodes asked but the emulated cluster {spec.prefix} has {spec.nodes}: "
            f"ask for at most {spec.nodes}, or `commbench cluster up --nodes {nodes}`"
        )
    return slurm.client_command(spec, folder, [])


def cmd_submit(args: argparse.Namespace) -> int:
    sbatch = _need("sbatch")
    profile = load_profile(args.system)
    client = slurm_client(profile, max(parse_nodes(args.nodes)))
    rendered = render_jobs(args)
    status = 0
    for job, path in zip(rendered, _write_all(rendered), strict=True):
        cmd = client + (
            [sbatch, "--test-only", str(path)]
            if args.test_only
            else [sbatch, "--parsable", str(path)]
        )
        proc = subprocess.run(cmd, cwd=job.run_dir, capture_output=True, text=True)
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            print(
                f"commbench jobs: sbatch failed for {path}: {msg[-1] if msg else proc.returncode}",
                file=sys.stderr,
            )
            status = 1
            continue
        if args.test_only:  # nothing will run: leave no run directory behind
            print(f"{path}: {(proc.stderr or proc.stdout).strip()}")
            path.unlink()
            job.run_dir.rmdir()
            continue
        job_id = proc.stdout.strip().split(";")[0]
        (job.run_dir / "job-id").write_text(job_id + "\n")
        print(f"{job_id} {job.run_id} {job.run_dir}")
    return status


# ---------------------------------------------------------------- status


def queue_states(job_ids: list[str], client: list[str] = ()) -> dict[str, str]:
    """job id -> Slurm state, from squeue (live jobs) then sacct (finished, if enabled);
    ``client``: the words that reach the Slurm (:func:`slurm_client`)."""
    states: dict[str, str] = {}
    if not job_ids or not shutil.which("squeue"):
        return states
    proc = subprocess.run(
        [*client, "squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(job_ids)],
        capture_output=True,
        text=True,
    )
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    rest = [j for j in job_ids if j not in states]
    if rest and shutil.which("sacct"):
        proc = subprocess.run(
            [*client, "sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(rest)],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            for line in proc.stdout.splitlines():
                job_id, _, state = line.partition("|")
                if job_id in rest and state:
                    states[job_id] = state.split()[0]
    return states


def _find_run(results_root: Path, run: str) -> Path:
    path = Path(run)
    if (path / SCRIPT_NAME).is_file():
        return path
    matches = sorted(results_root.glob(f"*/{run}/{SCRIPT_NAME}"))
    if not matches:
        raise UsageError(f"no run {run!r} under {results_root} (commbench jobs status lists them)")
    return matches[0].parent


def _status_client(system: str) -> list[str] | None:
    """The words that reach the Slurm that ran ``system``'s jobs; None when that is an
    emulated cluster's Slurm that no longer runs (nothing to ask)."""
    if system not in system_names():
        return []
    try:
        return slurm_client(load_profile(system))
    except UsageError:
        return None


def cmd_status(args: argparse.Namespace) -> int:
    results_root = (args.results or Path("results")).resolve()
    if args.run:
        states = [read_run_state(_find_run(results_root, args.run))]
    else:
        states = scan_runs(results_root)
        if not states:
            print(f"no rendered jobs under {results_root}")
            return 0
    queue: dict[str, str] = {}
    for system in sorted({s.system for s in states}):
        ids = [s.job_id for s in states if s.job_id and s.system == system]
        client = _status_client(system)
        if client is not None:
            queue.update(queue_states(ids, client))
    print(f"{'system':13s} {'run id':44s} {'job':>8s} {'slurm':12s} sentinel")
    for s in states:
        slurm = queue.get(s.job_id or "", "-" if not s.job_id else "left queue")
        sentinel = s.sentinel or "none"
        print(f"{s.system:13s} {s.run_id:44s} {s.job_id or '-':>8s} {slurm:12s} {sentinel}")
        if args.run:
            print(f"  directory {s.run_dir}")
            print("  files     " + " ".join(sorted(p.name for p in s.run_dir.iterdir())))
            if s.error:
                print("  error:\n" + "\n".join("    " + line for line in s.error.splitlines()))
    return 0


# ---------------------------------------------------------------- import


def _add_import_parser(sub) -> None:
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
    p.add_argument("--backend", choices=BACKENDS)
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
    launch = results.new_launch_id()
    for k, name in enumerate(args.files):  # each file a launch of its own
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"{name}: no such file")
        text = path.read_text(encoding="utf-8", errors="replace")
        one = {**context, "launch_id": f"{launch}-{k}"}
        records += external.parse_output(args.tool, text, str(path), one)
    writer = results.RecordWriter(args.out)
    writer.repair()
    for record in records:  # per-iteration times, where the tool kept them, to the side file
        writer.write(record, record.pop(external.RAW_KEY, None))
    print(
        f"commbench import: {len(records)} record(s) from {len(args.files)} file(s) -> {args.out}"
    )
    return 0


def add_parser(sub) -> None:
    _add_jobs_parser(sub)
    _add_import_parser(sub)
