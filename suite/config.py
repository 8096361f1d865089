"""Typed configuration: TOML tables parsed into pydantic models.

:func:`parse` validates one table against a model and turns pydantic's report into one
line that names the file, the table and the key (``jobs/emulated/x.toml: nodes: must be
an integer, not 'two'``). Models forbid unknown keys and never coerce between types (a
quoted number stays an error), like the TOML they read.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic
from pydantic import BaseModel, Field

from commbench.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

M = TypeVar("M", bound=pydantic.BaseModel)

STRICT = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

_KIND = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
}


def _message(key: str, err: Mapping[str, Any]) -> str:
    kind = err["type"]
    if kind == "missing":
        return f"missing key {key!r}"
    if kind == "extra_forbidden":
        return f"unknown key(s) {key}"
    if kind in _KIND:
        return f"{key} {_KIND[kind]}, not {err['input']!r}"
    text = str(err["msg"]).removeprefix("Value error, ")
    return f"{key} {re.sub(r'^[A-Z][a-z]* should ', 'must ', text)}"


def load_toml(path: Path) -> dict:
    """The TOML file ``path`` as a dict; a syntax error is a :class:`UsageError`."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None


def parse(model: type[M], data: Any, where: str, **extra: Any) -> M:
    """``model`` from the TOML table ``data`` (plus ``extra`` fields the file does not
    hold), or :class:`UsageError` naming ``where`` (file and table) and the key."""
    if not isinstance(data, Mapping):
        raise UsageError(f"{where}: expected a table, not {data!r}")
    try:
        return model.model_validate({**data, **extra})
    except pydantic.ValidationError as exc:
        raise UsageError(f"{where}: {'; '.join(_problems(exc.errors()))}") from None


#: What pydantic appends to an error's location for each member of a union (``int | str``).
_UNION_MEMBERS = {"int", "str", "float", "bool"}


def _problems(errors: list) -> list[str]:
    """One message per key; a value that fits no member of a union is one message too
    (``min must be an integer or a string, not True``)."""
    by_key: dict[str, list] = {}
    for err in errors:
        loc = [str(p) for p in err["loc"]]
        while len(loc) > 1 and loc[-1] in _UNION_MEMBERS:
            loc.pop()
        by_key.setdefault(".".join(loc), []).append(err)
    out = []
    for key, errs in by_key.items():
        kinds = [_KIND[e["type"]].removeprefix("must be ") for e in errs if e["type"] in _KIND]
        if len(errs) > 1 and len(kinds) == len(errs):
            out.append(f"{key} must be {' or '.join(kinds)}, not {errs[0]['input']!r}")
        else:
            out.extend(_message(key, e) for e in errs)
    return out


# ---------------------------------------------------------------- profile tables


class FabricTable(BaseModel):
    """``[fabric]`` of a system profile (see :class:`commbench.jobs.render.Fabric`)."""

    model_config = STRICT

    scaleup: str
    scaleup_GBps: float = Field(ge=0)
    scaleup_peer_GBps: float = Field(ge=0)
    scaleup_latency_us: float = Field(ge=0)
    scaleout: str
    scaleout_GBps: float = Field(ge=0)
    scaleout_latency_us: float = Field(ge=0)
    nics_per_node: int = Field(ge=1)
    stage_cost_us: float = Field(ge=0)
    msg_us: float | None = Field(None, ge=0)
    proxy_us: float | None = Field(None, ge=0)
    put_us: float | None = Field(None, ge=0)
    reduce_GBps: float | None = Field(None, ge=0)
    switch_buffer_MB: float | None = Field(None, ge=0)
    incast_lossless: float | None = Field(None, ge=0)
    incast_lossy: float | None = Field(None, ge=0)
    flow_control: Literal["lossless", "lossy"] | None = None
    nccl_ll128: bool | None = None
    sources: dict[str, str] = {}


class SiteKeyTable(BaseModel):
    """``[site.NAME]`` of a system profile (see :class:`commbench.jobs.render.SiteKey`)."""

    model_config = STRICT

    help: str = ""
    default: str = ""
    required: bool = False
    multinode_only: bool = False
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    option: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]*$")


class DevicesTable(BaseModel):
    """``[devices]``: what a node holds (``servers_per_node`` > 1 only when emulating)."""

    model_config = STRICT

    backend: str
    vendor: str
    model: str
    gpus_per_node: int = Field(ge=1)
    servers_per_node: int = Field(1, ge=1)


class NicsTable(BaseModel):
    model_config = STRICT

    model: str


class RunTable(BaseModel):
    """``[run]``: the Python on the nodes and what runs around commbench."""

    model_config = STRICT

    python: str
    modules: list[str] = []
    pre_run: list[str] = []
    post_run: list[str] = []
    extra_sbatch: list[str] = []


class LimitTable(BaseModel):
    model_config = STRICT

    max_nodes: int | None = Field(None, ge=1)
    max_walltime: str | None = None


class LimitsTable(LimitTable):
    """``[limits]`` with its ``[limits.partition.NAME]`` and ``[limits.qos.NAME]``."""

    partition: dict[str, LimitTable] = {}
    qos: dict[str, LimitTable] = {}


class ResourcesTable(BaseModel):
    """``[resources]``: how a job asks Slurm for CPUs and GPUs."""

    model_config = STRICT

    cpus_per_task: int | None = Field(None, ge=1)
    gpu_option: str = "gpus-per-node"
    exclusive: bool = False
    forbidden: list[str] = []


class CalibrationTable(BaseModel):
    """``[calibration]``: the ``NCCL_DEBUG=INFO`` run of multi-node GPU jobs."""

    model_config = STRICT

    collective: str = "allreduce"
    impl: str
    size: str = "1M"
    pattern: str


class LauncherTable(BaseModel):
    """``[launch.NAME]``: the launcher's command, options and per-rank wrapper."""

    model_config = STRICT

    command: str | None = None
    options: list[str] = []
    wrapper: list[str] = []


class LaunchTable(BaseModel):
    """``[launch]``: the default launcher and a table for each allowed one."""

    model_config = STRICT

    default: str
    srun: LauncherTable | None = None
    ibrun: LauncherTable | None = None
    mpirun: LauncherTable | None = None


class ProfileFile(BaseModel):
    """A system profile's top level. Its sub-tables are checked one by one with their
    own models, so that an error names the table it is in."""

    model_config = STRICT

    name: str
    description: str
    scheduler: Literal["slurm"] = "slurm"
    emulated_cluster: bool = False
    devices: dict[str, Any]
    nics: dict[str, Any]
    resources: dict[str, Any]
    launch: dict[str, Any]
    run: dict[str, Any]
    limits: dict[str, Any]
    fabric: dict[str, Any]
    calibration: dict[str, Any] | None = None
    env: dict[str, str] = {}
    env_multinode: dict[str, str] = {}
    env_partial_node: dict[str, str] = {}
    site: dict[str, dict[str, Any]] = {}


# ---------------------------------------------------------------- experiments


class StepOverride(BaseModel):
    """What ``[steps.by_system.SYSTEM]`` may change in a step (and a step's own fields)."""

    model_config = STRICT

    collective: str | None = None
    min: int | str | None = None
    max: int | str | None = None
    factor: int | None = None
    iters: int | None = None
    warmup: int | None = None
    check: int | None = None
    dtype: str | None = None
    workload: str | None = None
    timing: str | None = None
    average: int | None = None
    external: list[str] | None = None


class StepTable(StepOverride):
    """One ``[[NAME.steps]]`` table of ``jobs/experiments.toml``."""

    collective: str
    impls: dict[str, list[str]]
    by_system: dict[str, StepOverride] = {}


class ExperimentTable(BaseModel):
    """One ``[NAME]`` of ``jobs/experiments.toml``; its steps are checked one by one."""

    model_config = STRICT

    description: str
    walltime: str
    steps: list[dict[str, Any]] = Field(min_length=1)
