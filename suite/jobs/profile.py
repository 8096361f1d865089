"""System profiles: ``jobs/systems/NAME.toml`` as one validated pydantic model.

A profile (schema in ``jobs/README.md``) says how a machine is driven: devices, how to ask
for GPUs and which ``sbatch`` options it rejects, the launchers, modules, environment (a
base set, a multi-node-only set and one for partial nodes), limits, the site values the
user must supply (account, HCA names, ...) and the fabric constants the cost model reads
(``[fabric]``, :class:`commbench.kernels.model.fabric_table.FabricTable`).

:func:`load_profile` parses the file into :class:`Profile`, whose tables are the models
below; everything else (jobs, the cost model) reads those objects. A bad profile is one
:class:`UsageError` line naming the file, the table and the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator

from commbench.config import STRICT, load_toml, parse
from commbench.errors import UsageError
from commbench.harness.system_fabric import is_profile_path, profile_file
from commbench.jobs.syntax import NAME_RE, OPTION_RE, canonical_option, parse_walltime
from commbench.kernels.model.fabric_table import FabricTable
from commbench.kernels.registry import BACKENDS
from commbench.units import format_size, parse_size

#: the job files shipped with commbench (the repository's ``jobs/`` folder)
JOBS_DIR = Path(str(files("commbench.jobs.data")))
SYSTEMS_DIR = JOBS_DIR / "systems"

GPU_OPTIONS = ("gpus-per-node", "gres", "none")
#: an environment variable's name
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _walltime(text: str) -> str:
    parse_walltime(text)
    return text


#: A Slurm time (``HH:MM:SS``, ...), refused when :func:`parse_walltime` cannot read it.
Walltime = Annotated[str, AfterValidator(_walltime)]


def environ_name(site_key: str) -> str:
    """The environment variable that gives site value ``site_key``: ``COMMBENCH_KEY``."""
    return "COMMBENCH_" + site_key.upper()


class Devices(BaseModel):
    """``[devices]``: what a node holds (``servers_per_node`` > 1 only when emulating:
    several servers on one Slurm node)."""

    model_config = STRICT

    backend: str
    vendor: str
    model: str
    gpus_per_node: int = Field(ge=1)
    servers_per_node: int = Field(1, ge=1)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, backend: str) -> str:
        if backend not in BACKENDS:
            raise ValueError(f"must be one of {', '.join(BACKENDS)}")
        return backend

    @model_validator(mode="after")
    def _servers_only_emulated(self) -> Devices:
        if self.servers_per_node > 1 and self.backend != "cpu":
            raise ValueError("servers_per_node > 1 only emulates (backend cpu)")
        return self


class Nics(BaseModel):
    """``[nics]``: the NICs' model (shown, not used)."""

    model_config = STRICT

    model: str


class Resources(BaseModel):
    """``[resources]``: how a job asks Slurm for CPUs and GPUs; ``forbidden``: the
    ``sbatch`` options the system rejects (their long names once validated)."""

    model_config = STRICT

    cpus_per_task: int | None = Field(None, ge=1)
    gpu_option: str = "gpus-per-node"
    exclusive: bool = False
    forbidden: list[str] = []

    @field_validator("gpu_option")
    @classmethod
    def _known_gpu_option(cls, option: str) -> str:
        if option not in GPU_OPTIONS:
            raise ValueError(f"must be one of {', '.join(GPU_OPTIONS)}")
        return option

    @field_validator("forbidden")
    @classmethod
    def _long_names(cls, options: list[str]) -> list[str]:
        return [canonical_option(o) for o in options]


class Launcher(BaseModel):
    """``[launch.NAME]``: the launcher's command (default: NAME), its options and the
    per-rank wrapper (runs each rank: WRAPPER... COMMAND)."""

    model_config = STRICT

    command: str | None = None
    options: list[str] = []
    wrapper: list[str] = []


class Launch(BaseModel):
    """``[launch]``: the default launcher and a table for each allowed one."""

    model_config = STRICT

    default: str
    srun: Launcher | None = None
    ibrun: Launcher | None = None
    mpirun: Launcher | None = None

    @property
    def launchers(self) -> dict[str, Launcher]:
        """The launchers this system allows (those with a table), by name."""
        tables = {
            name: getattr(self, name) for name in type(self).model_fields if name != "default"
        }
        return {name: table for name, table in tables.items() if table is not None}

    @model_validator(mode="after")
    def _default_has_table(self) -> Launch:
        if self.default not in self.launchers:
            raise ValueError(f"default launcher {self.default!r} has no table")
        return self


class Run(BaseModel):
    """``[run]``: the Python on the nodes and what runs around commbench."""

    model_config = STRICT

    python: str
    modules: list[str] = []
    pre_run: list[str] = []
    post_run: list[str] = []
    extra_sbatch: list[str] = []


class Limit(BaseModel):
    """Limits of the system, a partition or a QOS."""

    model_config = STRICT

    max_nodes: int | None = Field(None, ge=1)
    max_walltime: Walltime | None = None

    @property
    def max_walltime_s(self) -> int | None:
        return None if self.max_walltime is None else parse_walltime(self.max_walltime)


class Limits(Limit):
    """``[limits]`` with its ``[limits.partition.NAME]`` and ``[limits.qos.NAME]``."""

    partition: dict[str, Limit] = {}
    qos: dict[str, Limit] = {}


class Calibration(BaseModel):
    """``[calibration]``: the ``NCCL_DEBUG=INFO`` run of multi-node GPU jobs; ``pattern``
    must be in its log."""

    model_config = STRICT

    collective: str = "allreduce"
    impl: str
    size: str = "1M"
    pattern: str

    @field_validator("size")
    @classmethod
    def _normal_size(cls, size: str) -> str:
        return format_size(parse_size(size))

    @field_validator("pattern")
    @classmethod
    def _regex(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"is not a regex: {exc}") from None
        return pattern


class SiteKey(BaseModel):
    """``[site.NAME]``: a value the user supplies (flag ``--set NAME=V``,
    ``COMMBENCH_NAME`` or the site file), exported as ``env`` or passed to ``sbatch`` as
    the long option ``option`` (or neither: the job reads it)."""

    model_config = STRICT

    help: str = ""
    default: str = ""
    required: bool = False
    multinode_only: bool = False
    env: str | None = Field(None, pattern=ENV_NAME)
    option: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]*$")

    @model_validator(mode="after")
    def _env_or_option(self) -> SiteKey:
        if self.env and self.option:
            raise ValueError("give env or option, not both")
        return self


#: Built-in site keys: where the external baselines' binaries are (empty: not configured).
EXTERNAL_SITE_KEYS = {
    "nccl_tests": SiteKey(help="folder with nccl-tests' *_perf binaries"),
    "rccl_tests": SiteKey(help="folder with rccl-tests' *_perf binaries"),
    "osu": SiteKey(help="folder with the OSU micro-benchmarks (osu_allreduce, ...)"),
    "osu_device": SiteKey(help="OSU -d value (cuda or rocm) when OSU was built so"),
}


class Profile(BaseModel):
    """A system profile, validated: its tables are the models above."""

    model_config = STRICT

    path: Path  # the file it was read from (not one of its keys)
    name: str
    description: str
    scheduler: Literal["slurm"] = "slurm"
    emulated_cluster: bool = False  # Slurm runs on the emulated cluster (commbench.cluster.slurm)
    devices: Devices
    nics: Nics
    resources: Resources
    launch: Launch
    run: Run
    limits: Limits
    fabric: FabricTable
    calibration: Calibration | None = None
    env: dict[str, str] = {}
    env_multinode: dict[str, str] = {}
    env_partial_node: dict[str, str] = {}
    site: dict[str, SiteKey] = {}

    @field_validator("env", "env_multinode", "env_partial_node")
    @classmethod
    def _variable_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not re.match(ENV_NAME, name):
                raise ValueError(f"{name!r} is not a variable name")
        return env

    @field_validator("site")
    @classmethod
    def _site_names(cls, site: dict[str, SiteKey]) -> dict[str, SiteKey]:
        for name in site:
            if not re.match(ENV_NAME, name) or name != name.lower():
                raise ValueError(f"site key {name!r} must be lower_case_with_underscores")
        if "python" in site:
            raise ValueError("'python' is built in (set [run] python)")
        for name in EXTERNAL_SITE_KEYS:
            if name in site:
                raise ValueError(f"{name!r} is built in (external baselines)")
        return dict(sorted(site.items()))

    @model_validator(mode="after")
    def _named_as_its_file(self) -> Profile:
        if self.name != self.path.stem:
            raise ValueError(f"name {self.name!r} must match the file name {self.path.stem!r}")
        return self

    @property
    def emulated(self) -> bool:
        """GPUs and servers are emulated by CPU ranks (the ``cpu`` backend)."""
        return self.devices.backend == "cpu"

    @property
    def site_keys(self) -> dict[str, SiteKey]:
        """Every site value the system takes: its ``[site]`` keys, ``python`` (default:
        ``[run] python``) and the external baselines' folders."""
        python = SiteKey(
            help="the Python that runs commbench on the nodes", default=self.run.python
        )
        return {**self.site, "python": python, **EXTERNAL_SITE_KEYS}

    def check_extra_option(self, text: str, where: str) -> None:
        """An ``extra_sbatch`` entry: long form, and not an option the system rejects."""
        if not OPTION_RE.match(text):
            raise UsageError(
                f"{where}: {text!r} is not an sbatch option: write --name or --name=value"
            )
        name = canonical_option(text)
        if name in self.resources.forbidden:
            raise UsageError(f"{self.name} rejects sbatch option --{name} ({where}): remove it")


def system_names(systems_dir: Path = SYSTEMS_DIR) -> list[str]:
    return sorted(p.stem for p in systems_dir.glob("*.toml"))


def load_profile(name: str, systems_dir: Path = SYSTEMS_DIR) -> Profile:
    """The profile ``jobs/systems/NAME.toml``, validated (:class:`UsageError` if not)."""
    path = systems_dir / f"{name}.toml"
    if not NAME_RE.match(name) or not path.is_file():
        known = ", ".join(system_names(systems_dir)) or "none"
        raise UsageError(f"unknown system {name!r}: choose one of {known}")
    return parse_profile(load_toml(path), path)


def load_system(name: str) -> Profile:
    """A shipped profile by name (:func:`load_profile`) or a profile file ``PATH.toml``
    (``UsageError`` naming it if it is missing or not a valid profile)."""
    if not is_profile_path(name):
        return load_profile(name)
    path = profile_file(name)
    return parse_profile(load_toml(path), path)


def parse_profile(data: Mapping, path: Path) -> Profile:
    """Validate profile ``data`` (read from ``path``) into a :class:`Profile`."""
    if isinstance(data, Mapping) and "path" in data:
        raise UsageError(f"{path}: unknown key(s) path")
    profile = parse(Profile, data, str(path), path=path)
    for opt in profile.run.extra_sbatch:
        profile.check_extra_option(opt, str(path))
    return profile
