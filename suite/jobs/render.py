"""Slurm jobs from data: system profiles, named experiments, allocation, rendering.

A *system profile* (``jobs/systems/NAME.toml``, schema in ``jobs/README.md``) says how a
machine is driven: devices, how to ask for GPUs and which ``sbatch`` options it rejects,
the launcher, modules, environment (a base set and a multi-node-only set), limits, site
values the user must supply (account, HCA names, ...) and the fabric constants the cost
model reads (:func:`load_profile`, :class:`Fabric`). An *experiment*
(``jobs/experiments.toml``) is a named list of ``commbench run`` sweeps with the
implementations to run per backend.

Everything here is pure except the file loaders: the allocation is computed and checked
against the profile's limits and forbidden options before anything is rendered, and the
script comes from one Jinja2 template per launcher (``jobs/templates/LAUNCHER.sh.j2``) in
a ``StrictUndefined`` environment whose ``finalize`` shell-quotes every value: a template
cannot emit an unquoted value by accident. Only :class:`Shell` strings (built here, from
values quoted here, or the profile's ``pre_run``/``post_run`` escape hatches, which are
shell code by definition) pass through as they are.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
import secrets
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from commbench.config import load_toml
from commbench.errors import UsageError
from commbench.jobs.external import SITE_KEYS, TOOL_BACKENDS, external_command, parse_external
from commbench.units import format_size, parse_size

#: the job files shipped with commbench (the repository's ``jobs/`` folder)
JOBS_DIR = Path(str(files("commbench.jobs.data")))
SYSTEMS_DIR = JOBS_DIR / "systems"
TEMPLATES_DIR = JOBS_DIR / "templates"
EXPERIMENTS_FILE = JOBS_DIR / "experiments.toml"
DEFAULT_SITE_FILE = Path("~/.config/commbench/site.toml")

LAUNCHERS = ("srun", "ibrun", "mpirun")
BACKENDS = ("cpu", "cuda", "rocm")
COLLECTIVES = ("allreduce", "alltoall", "alltoallv")
GPU_OPTIONS = ("gpus-per-node", "gres", "none")
#: Site keys with a meaning of their own: they become these ``sbatch`` options.
ACCESS_OPTIONS = {
    "account": "account",
    "qos": "qos",
    "partition": "partition",
    "constraint": "constraint",
}
#: ``sbatch`` short forms, used where the sites' documentation uses them (``-C gpu``).
SHORT_OPTIONS = {
    "account": "-A",
    "qos": "-q",
    "constraint": "-C",
    "partition": "-p",
    "nodes": "-N",
    "ntasks": "-n",
    "time": "-t",
    "cpus-per-task": "-c",
    "job-name": "-J",
    "output": "-o",
}
#: Short and alternative spellings users may put in ``extra_sbatch``.
OPTION_ALIASES = {
    **{short: long for long, short in SHORT_OPTIONS.items()},
    "-G": "gpus",
    "-e": "error",
    "-D": "chdir",
}
#: Options commbench computes (and checks against the profile's limits), with the flag to
#: use instead of ``--extra-sbatch``.
MANAGED_FIX = {
    "nodes": "use --nodes",
    "time": "use -t/--time",
    "account": "use --account",
    "qos": "use --qos",
    "partition": "use --partition",
    "constraint": "use --constraint",
    "ntasks": "use --tasks-per-node",
    "ntasks-per-node": "use --tasks-per-node",
    "cpus-per-task": "use --cpus-per-task",
    "gpus-per-node": "use --tasks-per-node (one GPU per rank)",
    "gres": "use --tasks-per-node (one GPU per rank)",
}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPTION_RE = re.compile(r"^--([a-z][a-z0-9-]*)(?:=(.*))?$", re.DOTALL)
_WALLTIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class Shell(str):
    """Text that is already valid shell (quoted here, or a profile's escape hatch)."""


def quote(value: Any) -> str:
    """One shell word for ``value``; refuses newlines and NUL, which no word may carry."""
    text = str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        raise UsageError(f"value {text!r} contains a newline or NUL: remove it")
    quoted = shlex.quote(text)
    # `export X==a` is valid bash, but it reads like a typo (and shellcheck says so).
    return f"'{text}'" if quoted == text and text.startswith("=") else quoted


def shell_finalize(value: Any) -> str:
    """Jinja ``finalize``: every ``{{ value }}`` becomes quoted shell words."""
    if isinstance(value, Shell):
        return str(value)
    if isinstance(value, list | tuple):
        return " ".join(shell_finalize(v) for v in value)
    return quote(value)


# ---------------------------------------------------------------- reading TOML data


# ---------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Fabric:
    """Interconnect constants for the cost model (``[fabric]`` of a profile).

    Bandwidths are usable payload GB/s (1e9 bytes) per direction; latencies are the
    per-message start-up cost (alpha) in microseconds.

    - ``scaleup_GBps``: one GPU to the other GPUs of its node, all links together;
      ``scaleup_peer_GBps``: one GPU to one peer (equal to it behind a switch);
      0 for both when a node has one GPU (no scale-up tier).
    - ``scaleout_GBps``: one NIC (``nics_per_node`` of them per node, rail-aligned
      when there is one per GPU).
    - ``stage_cost_us``: fixed cost of one FAST stage (synchronisation and launch).
    - optional mechanisms (``None``: the model's default): ``msg_us`` (host cost per
      posted message), ``proxy_us`` (one pass through NCCL/RCCL's network proxy thread),
      ``put_us`` (one NVSHMEM put through its transport), ``reduce_GBps``;
      ``switch_buffer_MB`` (a receiving port's share of the switch buffer) with
      ``incast_lossless`` / ``incast_lossy`` (loss per extra sender once it overflows)
      and ``flow_control`` naming which of the two the fabric runs; ``nccl_ll128``
      (false where NCCL disables its LL128 protocol: GPU-NIC path through the CPU).
    - ``sources``: for each constant, where its value comes from (a published
      measurement, a vendor spec, or "estimate: ..."); ``[fabric.sources]``.
    """

    scaleup: str
    scaleup_GBps: float
    scaleup_peer_GBps: float
    scaleup_latency_us: float
    scaleout: str
    scaleout_GBps: float
    scaleout_latency_us: float
    nics_per_node: int
    stage_cost_us: float
    msg_us: float | None = None
    proxy_us: float | None = None
    put_us: float | None = None
    reduce_GBps: float | None = None
    switch_buffer_MB: float | None = None
    incast_lossless: float | None = None
    incast_lossy: float | None = None
    flow_control: str | None = None
    nccl_ll128: bool | None = None
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)


#: optional numeric ``[fabric]`` keys (cost-model mechanisms)
FABRIC_OPTIONAL = (
    "msg_us",
    "proxy_us",
    "put_us",
    "reduce_GBps",
    "switch_buffer_MB",
    "incast_lossless",
    "incast_lossy",
)

FABRIC_FIELDS = tuple(f.name for f in dataclasses.fields(Fabric) if f.name != "sources")


@dataclass(frozen=True)
class SiteKey:
    """A value the user supplies: flag ``--set NAME=V``, ``COMMBENCH_NAME``, or site file."""

    name: str
    help: str
    default: str = ""
    required: bool = False
    multinode_only: bool = False
    env: str | None = None  # exported under this name when set
    option: str | None = None  # or passed to sbatch as this long option

    @property
    def environ_name(self) -> str:
        return "COMMBENCH_" + self.name.upper()


@dataclass(frozen=True)
class Limit:
    max_nodes: int | None = None
    max_walltime_s: int | None = None


@dataclass(frozen=True)
class Launcher:
    name: str
    command: str
    options: tuple[str, ...] = ()
    wrapper: tuple[str, ...] = ()  # runs each rank: WRAPPER... COMMAND (mpirun only)


@dataclass(frozen=True)
class Calibration:
    """The ``NCCL_DEBUG=INFO`` run of multi-node GPU jobs: ``pattern`` must be in its log."""

    collective: str
    impl: str
    size: str
    pattern: str


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    path: Path
    backend: str
    vendor: str
    model: str
    gpus_per_node: int
    servers_per_node: int  # > 1 only when emulating: several servers on one Slurm node
    nic_model: str
    cpus_per_task: int | None
    gpu_option: str
    exclusive: bool
    forbidden: tuple[str, ...]
    launcher: str
    launchers: Mapping[str, Launcher]
    python: str
    modules: tuple[str, ...]
    env: Mapping[str, str]
    env_multinode: Mapping[str, str]
    env_partial_node: Mapping[str, str]
    pre_run: tuple[str, ...]
    post_run: tuple[str, ...]
    extra_sbatch: tuple[str, ...]
    site: Mapping[str, SiteKey]
    limits: Limit
    partition_limits: Mapping[str, Limit]
    qos_limits: Mapping[str, Limit]
    fabric: Fabric
    calibration: Calibration | None
    emulated_cluster: bool = False  # Slurm runs on the emulated cluster (commbench.cluster.slurm)
    data: Mapping = field(repr=False, compare=False, default_factory=dict)

    @property
    def emulated(self) -> bool:
        """GPUs and servers are emulated by CPU ranks (the ``cpu`` backend)."""
        return self.backend == "cpu"


def system_names(systems_dir: Path = SYSTEMS_DIR) -> list[str]:
    return sorted(p.stem for p in systems_dir.glob("*.toml"))


def load_profile(name: str, systems_dir: Path = SYSTEMS_DIR) -> Profile:
    """The profile ``jobs/systems/NAME.toml``, validated (:class:`UsageError` if not)."""
    path = systems_dir / f"{name}.toml"
    if not _NAME_RE.match(name) or not path.is_file():
        known = ", ".join(system_names(systems_dir)) or "none"
        raise UsageError(f"unknown system {name!r}: choose one of {known}")
    return parse_profile(load_toml(path), path)


def load_fabric(name: str) -> Fabric:
    """Just the fabric constants of system ``name`` (what the cost model needs)."""
    return load_profile(name).fabric


def _limit(table: Any) -> Limit:
    """A :class:`Limit` from a parsed ``LimitTable``."""
    walltime = None if table.max_walltime is None else parse_walltime(table.max_walltime)
    return Limit(table.max_nodes, walltime)


def _site_key(name: str, data: Any, where: str) -> SiteKey:
    from commbench.config import SiteKeyTable, parse

    if not _ENV_NAME_RE.match(name) or name != name.lower():
        raise UsageError(f"{where}: site key {name!r} must be lower_case_with_underscores")
    key = SiteKey(name=name, **parse(SiteKeyTable, data, where).model_dump())
    if key.env and key.option:
        raise UsageError(f"{where}: give env or option, not both")
    return key


def _env_map(env: Mapping[str, str], where: str) -> dict[str, str]:
    for name in env:
        if not _ENV_NAME_RE.match(name):
            raise UsageError(f"{where}: {name!r} is not a variable name")
    return dict(env)


def parse_profile(data: Mapping, path: Path) -> Profile:
    """Validate profile ``data`` (read from ``path``) into a :class:`Profile`."""
    from commbench.config import (
        CalibrationTable,
        DevicesTable,
        FabricTable,
        LaunchTable,
        LimitsTable,
        NicsTable,
        ProfileFile,
        ResourcesTable,
        RunTable,
        parse,
    )

    top = parse(ProfileFile, data, str(path))
    name, description = top.name, top.description
    if name != path.stem:
        raise UsageError(f"{path}: name {name!r} must match the file name {path.stem!r}")

    def typed(model, key: str):
        return parse(model, getattr(top, key), f"{path} [{key}]")

    dev = typed(DevicesTable, "devices")
    backend, vendor, model = dev.backend, dev.vendor, dev.model
    gpus, servers = dev.gpus_per_node, dev.servers_per_node
    if backend not in BACKENDS:
        raise UsageError(f"{path} [devices]: backend must be one of {', '.join(BACKENDS)}")
    if servers > 1 and backend != "cpu":
        raise UsageError(f"{path} [devices]: servers_per_node > 1 only emulates (backend cpu)")
    nic_model = typed(NicsTable, "nics").model

    res = typed(ResourcesTable, "resources")
    cpus_per_task, gpu_option, exclusive = res.cpus_per_task, res.gpu_option, res.exclusive
    if gpu_option not in GPU_OPTIONS:
        raise UsageError(f"{path} [resources]: gpu_option must be one of {', '.join(GPU_OPTIONS)}")
    forbidden = tuple(canonical_option(o, f"{path} [resources]") for o in res.forbidden)

    launch = typed(LaunchTable, "launch")
    launchers = {
        lname: Launcher(lname, lt.command or lname, tuple(lt.options), tuple(lt.wrapper))
        for lname in LAUNCHERS
        if (lt := getattr(launch, lname)) is not None
    }
    default_launcher = launch.default
    if default_launcher not in launchers:
        raise UsageError(f"{path} [launch]: default launcher {default_launcher!r} has no table")

    run = typed(RunTable, "run")
    python, modules = run.python, tuple(run.modules)
    pre_run, post_run = tuple(run.pre_run), tuple(run.post_run)
    extra_sbatch = tuple(run.extra_sbatch)

    env = _env_map(top.env, f"{path} [env]")
    env_multinode = _env_map(top.env_multinode, f"{path} [env_multinode]")
    env_partial = _env_map(top.env_partial_node, f"{path} [env_partial_node]")

    site_where = f"{path} [site]"
    site = {k: _site_key(k, v, f"{site_where} [{k}]") for k, v in sorted(top.site.items())}
    if "python" in site:
        raise UsageError(f"{site_where}: 'python' is built in (set [run] python)")
    site["python"] = SiteKey("python", "the Python that runs commbench on the nodes", python)
    for site_name, key in EXTERNAL_SITE_KEYS.items():
        if site_name in site:
            raise UsageError(f"{site_where}: {site_name!r} is built in (external baselines)")
        site[site_name] = key

    lims = typed(LimitsTable, "limits")
    limits = _limit(lims)
    partition_limits = {name: _limit(t) for name, t in lims.partition.items()}
    qos_limits = {name: _limit(t) for name, t in lims.qos.items()}

    fabric = Fabric(**typed(FabricTable, "fabric").model_dump())

    calibration = None
    if top.calibration is not None:
        cal = typed(CalibrationTable, "calibration")
        size = format_size(parse_size(cal.size))
        calibration = Calibration(cal.collective, cal.impl, size, cal.pattern)
        try:
            re.compile(calibration.pattern)
        except re.error as exc:
            raise UsageError(f"{path} [calibration]: pattern is not a regex: {exc}") from None
    emulated_cluster = top.emulated_cluster

    profile = Profile(
        name=name,
        description=description,
        path=path,
        backend=backend,
        vendor=vendor,
        model=model,
        gpus_per_node=gpus,
        servers_per_node=servers,
        nic_model=nic_model,
        cpus_per_task=cpus_per_task,
        gpu_option=gpu_option,
        exclusive=exclusive,
        forbidden=forbidden,
        launcher=default_launcher,
        launchers=launchers,
        python=python,
        modules=modules,
        env=env,
        env_multinode=env_multinode,
        env_partial_node=env_partial,
        pre_run=pre_run,
        post_run=post_run,
        extra_sbatch=extra_sbatch,
        site=site,
        limits=limits,
        partition_limits=partition_limits,
        qos_limits=qos_limits,
        fabric=fabric,
        calibration=calibration,
        emulated_cluster=emulated_cluster,
        data=data,
    )
    for opt in extra_sbatch:
        check_extra_option(profile, opt, str(path))
    return profile


# ---------------------------------------------------------------- site values

#: Built-in site keys: where the external baselines' binaries are (empty: not configured).
EXTERNAL_SITE_KEYS = {
    "nccl_tests": SiteKey("nccl_tests", "folder with nccl-tests' *_perf binaries"),
    "rccl_tests": SiteKey("rccl_tests", "folder with rccl-tests' *_perf binaries"),
    "osu": SiteKey("osu", "folder with the OSU micro-benchmarks (osu_allreduce, ...)"),
    "osu_device": SiteKey("osu_device", "OSU -d value (cuda or rocm) when OSU was built so"),
}

#: What a user's site file may set for a system besides its site keys.
SITE_FILE_EXTRAS = ("modules", "pre_run", "post_run", "extra_sbatch", "max_nodes", "max_walltime")


def read_site_file(path: Path | None, environ: Mapping[str, str]) -> tuple[Path | None, dict]:
    """The user's override file: ``path``, else ``$COMMBENCH_SITE_FILE``, else the default.

    An explicit path must exist; the default one is optional. One table per system.
    """
    explicit = path or environ.get("COMMBENCH_SITE_FILE")
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise UsageError(f"site file {p} does not exist")
        return p, load_toml(p)
    p = DEFAULT_SITE_FILE.expanduser()
    return (p, load_toml(p)) if p.is_file() else (None, {})


def _site_file_model(profile: Profile) -> type:
    """The typed ``[SYSTEM]`` table of a site file (a pydantic model): the profile's site
    keys (strings) and :data:`SITE_FILE_EXTRAS`."""
    import pydantic

    from commbench.config import STRICT

    fields: dict[str, Any] = {key: (str | None, None) for key in profile.site}
    fields.update(
        {
            key: (list[str] | None, None)
            for key in ("modules", "pre_run", "post_run", "extra_sbatch")
        },
        max_nodes=(int | None, pydantic.Field(None, ge=1)),
        max_walltime=(str | None, None),
    )
    return pydantic.create_model(f"SiteFile_{profile.name}", __config__=STRICT, **fields)


def apply_site_file(profile: Profile, table: Mapping, where: str) -> tuple[Profile, dict[str, str]]:
    """Apply a site file's ``[SYSTEM]`` table: returns the profile and its site values."""
    where = f"{where} [{profile.name}]"
    allowed = [*profile.site, *SITE_FILE_EXTRAS]
    extra = sorted(set(table) - set(allowed)) if isinstance(table, Mapping) else []
    if extra:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(extra)} (allowed: {', '.join(allowed)})"
        )
    from commbench.config import parse

    site = parse(_site_file_model(profile), table, where)
    values = {key: getattr(site, key) for key in profile.site if getattr(site, key) is not None}
    changes: dict[str, Any] = {
        key: tuple(getattr(site, key))
        for key in ("modules", "pre_run", "post_run", "extra_sbatch")
        if getattr(site, key) is not None
    }
    if site.max_nodes is not None or site.max_walltime is not None:
        lim = profile.limits
        walltime = None if site.max_walltime is None else parse_walltime(site.max_walltime)
        changes["limits"] = Limit(
            site.max_nodes if site.max_nodes is not None else lim.max_nodes,
            walltime or lim.max_walltime_s,
        )
    profile = dataclasses.replace(profile, **changes)
    for opt in profile.extra_sbatch:
        check_extra_option(profile, opt, where)
    return profile, values


def placeholders(
    bindir: Path, jobs_dir: Path = JOBS_DIR, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    from commbench.cluster.slurm import cluster_folder

    return {"bin": str(bindir), "jobs": str(jobs_dir), "cluster": str(cluster_folder(environ))}


def expand(text: str, places: Mapping[str, str]) -> str:
    """``{bin}`` (the running Python's bin directory), ``{jobs}`` (commbench's job files) and
    ``{cluster}`` (the state dir of the emulated cluster ``$COMMBENCH_CLUSTER_PREFIX``)."""
    for name, value in places.items():
        text = text.replace("{" + name + "}", value)
    return text


def resolve_site(
    profile: Profile,
    given: Mapping[str, str],
    environ: Mapping[str, str],
    file_values: Mapping[str, str],
    nodes: int,
    places: Mapping[str, str],
) -> dict[str, str]:
    """Site values by precedence: flag, ``COMMBENCH_NAME``, site file, profile default.

    A required value that is missing (for ``multinode_only`` keys: in a multi-node job)
    is an error that says the three ways to give it. Placeholders in values are
    expanded (:func:`expand`).
    """
    unknown = sorted(set(given) - set(profile.site))
    if unknown:
        raise UsageError(
            f"{profile.name} has no site value {unknown[0]!r}: "
            f"it takes {', '.join(sorted(profile.site))}"
        )
    values = {}
    for name, key in profile.site.items():
        for source in (given.get(name), environ.get(key.environ_name), file_values.get(name)):
            if source is not None and source != "":
                value = source
                break
        else:
            value = key.default
        if key.required and not value and (nodes > 1 or not key.multinode_only):
            what = f" ({key.help})" if key.help else ""
            when = " for a multi-node job" if key.multinode_only else ""
            raise UsageError(
                f"{profile.name} needs {name}{what}{when}: give --set {name}=VALUE, "
                f'set {key.environ_name}, or put {name} = "..." under [{profile.name}] '
                f"in {DEFAULT_SITE_FILE}"
            )
        value = expand(value, places)
        quote(value)  # refuses newlines
        values[name] = value
    return values


# ---------------------------------------------------------------- allocation


def parse_walltime(text: str) -> int:
    """Slurm time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) -> seconds."""
    m = _WALLTIME_RE.match(str(text).strip())
    if not m:
        raise UsageError(f"bad walltime {text!r}: use HH:MM:SS, MM or D-HH:MM:SS")
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = a * 3600 + b * 60 + c
    elif b is not None:  # MM:SS
        seconds = a * 60 + b
    else:  # MM
        seconds = a * 60
    if seconds <= 0:
        raise UsageError(f"walltime {text!r} must be positive")
    return seconds


def format_walltime(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    hms = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{hms}" if days else hms


def parse_nodes(text: str) -> list[int]:
    """``"2,4,8"`` -> ``[2, 4, 8]`` (one job per node count)."""
    counts = []
    for part in str(text).split(","):
        try:
            n = int(part)
        except ValueError:
            raise UsageError(f"--nodes {text!r}: give node counts like 4 or 2,4,8") from None
        if n < 1:
            raise UsageError(f"--nodes {text!r}: node counts must be at least 1")
        if n in counts:
            raise UsageError(f"--nodes {text!r}: {n} appears twice")
        counts.append(n)
    return counts


@dataclass(frozen=True)
class Allocation:
    nodes: int
    tasks_per_node: int
    cpus_per_task: int | None
    gpus_per_node: int  # GPUs requested from Slurm per node (0: none requested)
    walltime_s: int

    @property
    def ntasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def multinode(self) -> bool:
        return self.nodes > 1


def compute_allocation(
    profile: Profile,
    nodes: int,
    walltime_s: int,
    tasks_per_node: int | None = None,
    cpus_per_task: int | None = None,
) -> Allocation:
    """One rank per GPU (per emulated GPU on ``cpu`` profiles), unless told fewer."""
    full = profile.gpus_per_node * profile.servers_per_node
    tpn = full if tasks_per_node is None else tasks_per_node
    if not 1 <= tpn <= full:
        raise UsageError(
            f"--tasks-per-node {tpn}: {profile.name} has {full} GPU(s) per node; give 1..{full}"
        )
    if profile.emulated and tpn % profile.gpus_per_node:
        raise UsageError(
            f"--tasks-per-node {tpn} must be a multiple of the {profile.gpus_per_node} "
            f"emulated GPUs per server of {profile.name}"
        )
    cpt = cpus_per_task if cpus_per_task is not None else profile.cpus_per_task
    if cpt is not None and cpt < 1:
        raise UsageError(f"--cpus-per-task must be at least 1 (got {cpt})")
    gpus = 0 if profile.emulated or profile.gpu_option == "none" else tpn
    return Allocation(nodes, tpn, cpt, gpus, walltime_s)


def validate_allocation(profile: Profile, alloc: Allocation, site: Mapping[str, str]) -> None:
    """Check the allocation against every limit that applies; the error names the limit."""
    checks = [(f"{profile.name}'s [limits]", profile.limits)]
    partition, qos = site.get("partition", ""), site.get("qos", "")
    if partition in profile.partition_limits:
        checks.append((f"partition {partition!r}", profile.partition_limits[partition]))
    if qos in profile.qos_limits:
        checks.append((f"QOS {qos!r}", profile.qos_limits[qos]))
    for what, lim in checks:
        if lim.max_nodes is not None and alloc.nodes > lim.max_nodes:
            raise UsageError(
                f"{alloc.nodes} nodes exceeds max_nodes = {lim.max_nodes} of {what} "
                f"({profile.path.name}): use at most {lim.max_nodes} nodes"
            )
        if lim.max_walltime_s is not None and alloc.walltime_s > lim.max_walltime_s:
            raise UsageError(
                f"walltime {format_walltime(alloc.walltime_s)} exceeds max_walltime = "
                f"{format_walltime(lim.max_walltime_s)} of {what} ({profile.path.name}): "
                "give a shorter -t"
            )


def canonical_option(text: str, where: str = "option") -> str:
    """``--mem=4G`` / ``--mem`` / ``-c`` -> the long name (``mem``, ``cpus-per-task``)."""
    text = text.strip()
    if text in OPTION_ALIASES:
        return OPTION_ALIASES[text]
    m = _OPTION_RE.match(text)
    if not m:
        raise UsageError(f"{where}: {text!r} is not an sbatch option: write --name or --name=value")
    return OPTION_ALIASES.get(f"--{m.group(1)}", m.group(1))


def check_extra_option(profile: Profile, text: str, where: str) -> None:
    """An ``extra_sbatch`` entry: long form, and not one the system rejects."""
    m = _OPTION_RE.match(text)
    if not m:
        raise UsageError(f"{where}: {text!r} is not an sbatch option: write --name or --name=value")
    name = canonical_option(text, where)
    if name in profile.forbidden:
        raise UsageError(f"{profile.name} rejects sbatch option --{name} ({where}): remove it")


def sbatch_options(
    profile: Profile,
    alloc: Allocation,
    site: Mapping[str, str],
    job_name: str,
    output: str,
    extra: Iterable[str] = (),
) -> list[tuple[str, str | None]]:
    """The ``#SBATCH`` options as (long name, value or None); forbidden ones refused."""
    opts: list[tuple[str, str | None]] = [
        ("job-name", job_name),
        ("nodes", str(alloc.nodes)),
        ("ntasks", str(alloc.ntasks)),
        ("ntasks-per-node", str(alloc.tasks_per_node)),
    ]
    if alloc.cpus_per_task is not None:
        opts.append(("cpus-per-task", str(alloc.cpus_per_task)))
    if alloc.gpus_per_node:
        if profile.gpu_option == "gpus-per-node":
            opts.append(("gpus-per-node", str(alloc.gpus_per_node)))
        elif profile.gpu_option == "gres":
            opts.append(("gres", f"gpu:{alloc.gpus_per_node}"))
    opts.append(("time", format_walltime(alloc.walltime_s)))
    for name, key in profile.site.items():
        option = None if key.env else (key.option or ACCESS_OPTIONS.get(name))
        if option and site.get(name):
            opts.append((option, site[name]))
    if profile.exclusive:
        opts.append(("exclusive", None))
    opts.append(("output", output))
    managed = {name for name, _ in opts} | set(MANAGED_FIX)
    managed |= {key.option for key in profile.site.values() if key.option}
    for text in [*profile.extra_sbatch, *extra]:
        check_extra_option(profile, text, "extra sbatch options")
        name = canonical_option(text)
        if name in managed:
            raise UsageError(
                f"extra sbatch option {text!r}: commbench sets --{name} itself from its own "
                f"flags, checked against {profile.path.name}: "
                f"{MANAGED_FIX.get(name, 'remove it')}"
            )
        m = _OPTION_RE.match(text)
        opts.append((name, m.group(2)))
    for name, _ in opts:
        if name in profile.forbidden:
            raise UsageError(
                f"{profile.name} rejects sbatch option --{name}: "
                f"check [resources] and [site] in {profile.path.name}"
            )
    return opts


def format_sbatch_option(name: str, value: str | None) -> Shell:
    """``-C gpu``, ``--gpus-per-node=4``: short forms where the sites' docs use them."""
    if value is None:
        return Shell(f"--{name}")
    if name in SHORT_OPTIONS:
        return Shell(f"{SHORT_OPTIONS[name]} {quote(value)}")
    return Shell(f"--{name}={quote(value)}")


# ---------------------------------------------------------------- experiments


@dataclass(frozen=True)
class Step:
    """One ``commbench run`` sweep, run once per implementation."""

    collective: str
    impls: Mapping[str, tuple[str, ...]]  # backend -> implementation names
    min: str = "1K"
    max: str = "1M"
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    check: int = 1
    dtype: str | None = None
    workload: str | None = None
    timing: str | None = None
    average: int | None = None
    external: tuple[str, ...] = ()  # "TOOL" or "TOOL:BINARY" (commbench.jobs.external)
    by_system: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def for_system(self, system: str) -> Step:
        """This step with ``by_system.SYSTEM`` overrides applied (and re-validated)."""
        over = self.by_system.get(system)
        if not over:
            return self
        return _validate_step(dataclasses.replace(self, **over, by_system={}), f"step for {system}")


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    walltime_s: int
    steps: tuple[Step, ...]


def _validate_step(step: Step, where: str) -> Step:
    if step.collective not in COLLECTIVES:
        raise UsageError(f"{where}: collective must be one of {', '.join(COLLECTIVES)}")
    for backend, names in step.impls.items():
        if backend not in BACKENDS:
            raise UsageError(f"{where}: impls has unknown backend {backend!r}")
        for n in names:
            if not _NAME_RE.match(n):
                raise UsageError(f"{where}: bad implementation name {n!r}")
    lo, hi = parse_size(step.min), parse_size(step.max)
    if lo > hi:
        raise UsageError(f"{where}: min {step.min} is larger than max {step.max}")
    if step.factor < 2 or step.iters < 1 or step.warmup < 0 or step.check not in (0, 1):
        raise UsageError(f"{where}: need factor >= 2, iters >= 1, warmup >= 0, check 0 or 1")
    if step.timing not in (None, "pipelined", "latency"):
        raise UsageError(f"{where}: timing must be pipelined or latency")
    if step.average not in (None, 0, 1, 2, 3):
        raise UsageError(f"{where}: average (-a) must be 0, 1, 2 or 3")
    if step.dtype is not None:
        from commbench.harness.backends.dtypes import parse_dtype

        parse_dtype(step.dtype)
    for entry in step.external:
        try:
            parse_external(entry, step.collective)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
    if step.workload is not None:
        if step.collective != "alltoallv":
            raise UsageError(f"{where}: workload applies to alltoallv only")
        from commbench.harness.workloads import expand_workloads

        expand_workloads(step.workload)
    return step


def _step_fields(table, where: str) -> dict[str, Any]:
    """The fields a parsed step table sets (sizes normalised, lists as tuples)."""
    out: dict[str, Any] = {}
    for key, value in table.model_dump(exclude_unset=True).items():
        if key in ("impls", "by_system"):
            continue
        if key in ("min", "max"):
            try:
                value = format_size(parse_size(value))
            except ValueError:
                raise UsageError(f'{where}: {key} must be a size like 65536 or "64K"') from None
        out[key] = tuple(value) if key == "external" else value
    return out


def parse_step(data: Mapping, where: str) -> Step:
    from commbench.config import StepTable, parse

    table = parse(StepTable, data, where)
    by_system = {}
    for system, over in table.by_system.items():
        if over.collective is not None:
            raise UsageError(
                f"{where} [by_system] [{system}]: the collective cannot change per system"
            )
        by_system[system] = _step_fields(over, f"{where} [by_system] [{system}]")
    impls = {backend: tuple(names) for backend, names in table.impls.items()}
    step = _validate_step(
        Step(impls=impls, by_system=by_system, **_step_fields(table, where)), where
    )
    for system in by_system:
        step.for_system(system)
    return step


def load_experiments(path: Path = EXPERIMENTS_FILE) -> dict[str, Experiment]:
    """Every experiment in ``jobs/experiments.toml``, validated."""
    from commbench.config import ExperimentTable, parse

    out = {}
    for name, data in load_toml(path).items():
        where = f"{path} [{name}]"
        if not _NAME_RE.match(name):
            raise UsageError(f"{where}: experiment names use letters, digits, '.', '_', '-'")
        table = parse(ExperimentTable, data, where)
        out[name] = Experiment(
            name=name,
            description=table.description,
            walltime_s=parse_walltime(table.walltime),
            steps=tuple(parse_step(s, f"{where} step {i + 1}") for i, s in enumerate(table.steps)),
        )
    return out


def load_experiment(name: str, path: Path = EXPERIMENTS_FILE) -> Experiment:
    experiments = load_experiments(path)
    if name not in experiments:
        raise UsageError(
            f"unknown experiment {name!r}: choose one of {', '.join(sorted(experiments))}"
        )
    return experiments[name]


def custom_experiment(
    collective: str,
    impls: list[str],
    backend: str,
    available: Mapping[tuple[str, str], tuple[str, ...]],
    walltime_s: int,
    **step_fields: Any,
) -> Experiment:
    """An experiment from ``render`` run options; unknown implementations are errors here."""
    step = _validate_step(
        Step(collective=collective, impls={backend: tuple(impls)}, **step_fields), "run options"
    )
    if not impls:
        raise UsageError("give --impl NAME[,NAME...] with --collective")
    for name in impls:
        backends = available.get((collective, name))
        if backends is None:
            known = ", ".join(sorted(n for c, n in available if c == collective)) or "none"
            raise UsageError(f"unknown implementation {name!r} of {collective} (known: {known})")
        if backend not in backends:
            raise UsageError(
                f"implementation {name!r} does not run on backend {backend!r} "
                f"(it runs on {', '.join(backends)})"
            )
    return Experiment("custom", f"{collective} {','.join(impls)}", walltime_s, (step,))


def registered_implementations() -> dict[tuple[str, str], tuple[str, ...]]:
    """(collective, name) -> backends, from :mod:`commbench.kernels.registry`."""
    from commbench.kernels.registry import implementations

    return {(s.collective, s.name): tuple(s.backends) for s in implementations()}


# ---------------------------------------------------------------- the job


@dataclass(frozen=True)
class RunCommand:
    name: str  # also the log file's stem: "01-allreduce-nvrar"
    collective: str
    impl: str
    args: tuple[str, ...]  # after `python -m commbench run`


@dataclass(frozen=True)
class ExternalRun:
    """One external baseline run: ``binary`` is empty when the site did not configure it."""

    name: str
    tool: str
    binary: str
    path: str  # the binary's path, "" when not configured
    args: tuple[str, ...]
    import_args: tuple[str, ...]  # after `python -m commbench import`
    reason: str = ""  # why it is skipped (not configured)


def plan_external(
    experiment: Experiment,
    profile: Profile,
    site: Mapping[str, str],
    alloc: Allocation,
    results_file: str,
    first_index: int,
) -> tuple[list[ExternalRun], list[str]]:
    """The external baselines of ``experiment`` on ``profile`` (same sizes and iterations as
    the commbench step they are listed in), and those that cannot run on its backend."""
    runs, skipped = [], []
    for step in experiment.steps:
        step = step.for_system(profile.name)
        for entry in step.external:
            tool, binary = parse_external(entry, step.collective)
            if binary is None:
                skipped.append(f"{step.collective} {tool}: {tool} has no {step.collective} test")
                continue
            if profile.backend not in TOOL_BACKENDS[tool]:
                skipped.append(f"{step.collective} {tool}: does not run on {profile.backend}")
                continue
            from commbench.harness.backends.dtypes import parse_dtype
            from commbench.kernels.dtypes import dtype_name

            dtype = dtype_name(parse_dtype(step.dtype)) if step.dtype else None
            # OSU's all-to-all sizes are per peer; commbench's (and nccl-tests') per rank
            per = alloc.ntasks if tool == "osu" and step.collective != "allreduce" else 1
            cmd = external_command(
                tool,
                binary,
                min_size=max(1, parse_size(step.min) // per),
                max_size=max(1, parse_size(step.max) // per),
                factor=step.factor,
                iters=step.iters,
                warmup=step.warmup,
                check=step.check,
                dtype=dtype,
                backend=profile.backend,
                osu_device=site.get("osu_device", ""),
            )
            name = f"{first_index + len(runs):02d}-{step.collective}-{_slug(tool)}-{binary}"
            folder = site.get(SITE_KEYS[tool], "")
            key = EXTERNAL_SITE_KEYS[SITE_KEYS[tool]]
            reason = (
                ""
                if folder
                else f"{tool} not configured: set {key.environ_name}, --set {key.name}=DIR "
                f"or {key.name} in the site file"
            )
            import_args = [tool, f"logs/{name}.log", "--binary", binary, "--out", results_file]
            import_args += ["--nranks", str(alloc.ntasks), "--nodes", str(alloc.nodes)]
            import_args += ["--backend", profile.backend]
            if profile.backend != "cpu":
                import_args += ["--gpus-per-node", str(profile.gpus_per_node)]
            path = str(Path(folder) / binary) if folder else ""
            runs.append(ExternalRun(name, tool, binary, path, cmd.args, tuple(import_args), reason))
    return runs, skipped


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def step_args(step: Step, impl: str, backend: str, gpus_per_node: int | None, out: str) -> list:
    args = [step.collective, "--impl", impl, "--backend", backend]
    if gpus_per_node is not None:
        args += ["--gpus-per-node", str(gpus_per_node)]
    args += ["-b", step.min, "-e", step.max, "-f", str(step.factor)]
    args += ["-n", str(step.iters), "-w", str(step.warmup), "-c", str(step.check)]
    if step.dtype:
        args += ["-d", step.dtype]
    if step.average is not None:
        args += ["-a", str(step.average)]
    if step.timing:
        args += ["--timing", step.timing]
    if step.workload:
        args += ["--workload", step.workload]
    return [*args, "--out", out]


def plan_runs(
    experiment: Experiment,
    profile: Profile,
    available: Mapping[tuple[str, str], tuple[str, ...]],
    results_file: str,
) -> tuple[list[RunCommand], list[str]]:
    """The runs of ``experiment`` on ``profile``, and the implementations skipped (why)."""
    runs, skipped = [], []
    gpn = profile.gpus_per_node if profile.emulated else None
    for step in experiment.steps:
        step = step.for_system(profile.name)
        for impl in step.impls.get(profile.backend, ()):
            backends = available.get((step.collective, impl))
            if backends is None:
                skipped.append(f"{step.collective} {impl}: not registered")
                continue
            if profile.backend not in backends:
                skipped.append(
                    f"{step.collective} {impl}: does not run on {profile.backend} "
                    f"(runs on {','.join(backends)})"
                )
                continue
            name = f"{len(runs) + 1:02d}-{step.collective}-{_slug(impl)}"
            args = step_args(step, impl, profile.backend, gpn, results_file)
            runs.append(RunCommand(name, step.collective, impl, tuple(args)))
    if not runs:
        why = "; ".join(skipped) or f"no implementations listed for backend {profile.backend}"
        raise UsageError(
            f"experiment {experiment.name} has nothing to run on {profile.name}: {why}"
        )
    return runs, skipped


def new_run_id(label: str, nodes: int, now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{label}-n{nodes}-{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not _NAME_RE.match(run_id) or len(run_id) > 128:
        raise UsageError(f"bad run id {run_id!r}: use letters, digits, '.', '_', '+' and '-'")
    return run_id


@dataclass(frozen=True)
class Job:
    system: str
    run_id: str
    run_dir: Path
    script: str
    allocation: Allocation
    launcher: str
    runs: tuple[RunCommand, ...]
    skipped: tuple[str, ...]

    @property
    def script_path(self) -> Path:
        return self.run_dir / SCRIPT_NAME


SCRIPT_NAME = "job.sh"
RESULTS_NAME = "results.jsonl"


def template_environment(templates_dir: Path = TEMPLATES_DIR):
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shell_finalize,
        # bash's ${#array[@]} would open a default {# comment #}
        comment_start_string="{##",
        comment_end_string="##}",
    )


def _env_lines(profile: Profile, alloc: Allocation, site: Mapping[str, str]) -> list:
    env = dict(profile.env)
    if alloc.multinode:
        env.update(profile.env_multinode)
    if not profile.emulated and alloc.tasks_per_node < profile.gpus_per_node:
        env.update(profile.env_partial_node)
    for name, key in profile.site.items():
        if key.env and site.get(name) and (alloc.multinode or not key.multinode_only):
            env[key.env] = site[name]
    return sorted(env.items())


def render_job(
    profile: Profile,
    experiment: Experiment,
    alloc: Allocation,
    site: Mapping[str, str],
    *,
    run_id: str,
    bindir: Path,
    jobs_dir: Path = JOBS_DIR,
    results_root: Path,
    available: Mapping[tuple[str, str], tuple[str, ...]],
    launcher: str | None = None,
    extra_sbatch: Iterable[str] = (),
    templates_dir: Path = TEMPLATES_DIR,
) -> Job:
    """The batch script for one allocation (pure: writes nothing).

    ``bindir`` is the ``bin`` directory of the Python environment the jobs use, with
    commbench installed (``{bin}``), ``jobs_dir`` where they find commbench's job files
    (``{jobs}``).
    """
    places = placeholders(bindir, jobs_dir)
    check_run_id(run_id)
    launcher = launcher or profile.launcher
    if launcher not in profile.launchers:
        raise UsageError(
            f"{profile.name} does not launch with {launcher!r}: "
            f"use {', '.join(sorted(profile.launchers))}"
        )
    validate_allocation(profile, alloc, site)
    run_dir = Path(results_root) / profile.name / run_id
    results_file = str(run_dir / RESULTS_NAME)
    runs, skipped = plan_runs(experiment, profile, available, results_file)
    externals, ext_skipped = plan_external(
        experiment, profile, site, alloc, results_file, len(runs) + 1
    )
    skipped = [*skipped, *ext_skipped]
    sbatch = [
        format_sbatch_option(n, v)
        for n, v in sbatch_options(
            profile,
            alloc,
            site,
            job_name=f"cb-{experiment.name}-n{alloc.nodes}",
            output=str(run_dir / "slurm-%j.out"),
            extra=extra_sbatch,
        )
    ]
    spec = profile.launchers[launcher]
    calibration = None
    cal = profile.calibration
    if cal and alloc.multinode and not profile.emulated:
        calibration = {
            "pattern": cal.pattern,
            "args": [cal.collective, "--impl", cal.impl, "--backend", profile.backend]
            + ["-b", cal.size, "-e", cal.size, "-n", "5", "-w", "2", "-c", "1"]
            + ["--out", str(run_dir / "calibration.jsonl")],
        }
    context = {
        "system": profile.name,
        "experiment": experiment.name,
        "run_id": run_id,
        "launcher": launcher,
        "nodes": alloc.nodes,
        "ntasks": alloc.ntasks,
        "tasks_per_node": alloc.tasks_per_node,
        "sbatch": sbatch,
        "run_dir": str(run_dir),
        "python": site["python"],
        "modules": list(profile.modules),
        "env": _env_lines(profile, alloc, site),
        "pre_run": [Shell(line) for line in profile.pre_run],
        "post_run": [Shell(line) for line in profile.post_run],
        "launch_command": expand(spec.command, places),
        "launch_options": list(spec.options),
        "launch_wrapper": [expand(w, places) for w in spec.wrapper],
        "calibration": calibration,
        "runs": [{"name": r.name, "args": list(r.args)} for r in runs],
        "externals": [
            {
                "name": e.name,
                "path": e.path,
                "args": list(e.args),
                "import_args": list(e.import_args),
                "reason": e.reason,
            }
            for e in externals
        ],
        "skipped": skipped,
    }
    script = template_environment(templates_dir).get_template(f"{launcher}.sh.j2").render(context)
    return Job(profile.name, run_id, run_dir, script, alloc, launcher, tuple(runs), tuple(skipped))


def write_job(job: Job) -> Path:
    """Create the run directory and write the script (executable) into it."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    path = job.script_path
    if path.exists():
        raise UsageError(f"{path} exists: choose another --run-id")
    path.write_text(job.script)
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------- status


@dataclass(frozen=True)
class RunState:
    system: str
    run_id: str
    run_dir: Path
    job_id: str | None
    sentinel: str  # "ready", "error" or "" (none yet)
    error: str  # the error sentinel's text


def scan_runs(results_root: Path) -> list[RunState]:
    """Every rendered job under ``results_root/SYSTEM/RUN_ID/``, oldest first."""
    states = []
    for script in sorted(Path(results_root).glob(f"*/*/{SCRIPT_NAME}")):
        states.append(read_run_state(script.parent))
    return sorted(states, key=lambda s: s.run_dir.stat().st_mtime)


def read_run_state(run_dir: Path) -> RunState:
    job_file, error_file = run_dir / "job-id", run_dir / "error"
    job_id = job_file.read_text().strip() if job_file.is_file() else None
    if error_file.is_file():
        sentinel, error = "error", error_file.read_text().strip()
    elif (run_dir / "ready").is_file():
        sentinel, error = "ready", ""
    else:
        sentinel, error = "", ""
    return RunState(run_dir.parent.name, run_dir.name, run_dir, job_id, sentinel, error)
