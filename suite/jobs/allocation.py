"""What a job asks Slurm for: nodes, ranks, CPUs, GPUs and time, checked against the
profile's limits and forbidden options before anything is rendered."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.jobs.profile import Profile
from commbench.jobs.syntax import OPTION_RE, canonical_option, format_walltime

#: Site keys with a meaning of their own: they become these ``sbatch`` options.
ACCESS_OPTIONS = {
    "account": "account",
    "qos": "qos",
    "partition": "partition",
    "constraint": "constraint",
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
    dev = profile.devices
    full = dev.gpus_per_node * dev.servers_per_node
    tpn = full if tasks_per_node is None else tasks_per_node
    if not 1 <= tpn <= full:
        raise UsageError(
            f"--tasks-per-node {tpn}: {profile.name} has {full} GPU(s) per node; give 1..{full}"
        )
    if profile.emulated and tpn % dev.gpus_per_node:
        raise UsageError(
            f"--tasks-per-node {tpn} must be a multiple of the {dev.gpus_per_node} "
            f"emulated GPUs per server of {profile.name}"
        )
    cpt = cpus_per_task if cpus_per_task is not None else profile.resources.cpus_per_task
    if cpt is not None and cpt < 1:
        raise UsageError(f"--cpus-per-task must be at least 1 (got {cpt})")
    gpus = 0 if profile.emulated or profile.resources.gpu_option == "none" else tpn
    return Allocation(nodes, tpn, cpt, gpus, walltime_s)


def validate_allocation(profile: Profile, alloc: Allocation, site: Mapping[str, str]) -> None:
    """Check the allocation against every limit that applies; the error names the limit."""
    limits = profile.limits
    checks = [(f"{profile.name}'s [limits]", limits)]
    partition, qos = site.get("partition", ""), site.get("qos", "")
    if partition in limits.partition:
        checks.append((f"partition {partition!r}", limits.partition[partition]))
    if qos in limits.qos:
        checks.append((f"QOS {qos!r}", limits.qos[qos]))
    for what, lim in checks:
        if lim.max_nodes is not None and alloc.nodes > lim.max_nodes:
            raise UsageError(
                f"{alloc.nodes} nodes exceeds max_nodes = {lim.max_nodes} of {what} "
                f"({profile.path.name}): use at most {lim.max_nodes} nodes"
            )
        max_walltime_s = lim.max_walltime_s
        if max_walltime_s is not None and alloc.walltime_s > max_walltime_s:
            raise UsageError(
                f"walltime {format_walltime(alloc.walltime_s)} exceeds max_walltime = "
                f"{format_walltime(max_walltime_s)} of {what} ({profile.path.name}): "
                "give a shorter -t"
            )


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
    gpu_option = profile.resources.gpu_option
    if alloc.gpus_per_node:
        if gpu_option == "gpus-per-node":
            opts.append(("gpus-per-node", str(alloc.gpus_per_node)))
        elif gpu_option == "gres":
            opts.append(("gres", f"gpu:{alloc.gpus_per_node}"))
    opts.append(("time", format_walltime(alloc.walltime_s)))
    keys = profile.site_keys
    for name, key in keys.items():
        option = None if key.env else (key.option or ACCESS_OPTIONS.get(name))
        if option and site.get(name):
            opts.append((option, site[name]))
    if profile.resources.exclusive:
        opts.append(("exclusive", None))
    opts.append(("output", output))
    managed = {name for name, _ in opts} | set(MANAGED_FIX)
    managed |= {key.option for key in keys.values() if key.option}
    for text in [*profile.run.extra_sbatch, *extra]:
        profile.check_extra_option(text, "extra sbatch options")
        name = canonical_option(text)
        if name in managed:
            raise UsageError(
                f"extra sbatch option {text!r}: commbench sets --{name} itself from its own "
                f"flags, checked against {profile.path.name}: "
                f"{MANAGED_FIX.get(name, 'remove it')}"
            )
        opts.append((name, OPTION_RE.match(text).group(2)))
    for name, _ in opts:
        if name in profile.resources.forbidden:
            raise UsageError(
                f"{profile.name} rejects sbatch option --{name}: "
                f"check [resources] and [site] in {profile.path.name}"
            )
    return opts
