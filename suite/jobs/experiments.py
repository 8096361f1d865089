"""Named experiments (``jobs/experiments.toml``) and the runs they make on a system.

An experiment is a named list of ``commbench run`` sweeps (steps), each with the
implementations to run per backend, per-system overrides and the external baselines
(nccl-tests, OSU) to run next to it. :func:`plan_runs` and :func:`plan_external` turn one
into the commands a job runs on a profile, and say what they skip and why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from commbench.config import STRICT, load_toml, parse
from commbench.errors import UsageError
from commbench.jobs.allocation import Allocation
from commbench.jobs.external import (
    OSU_PER_PEER,
    SITE_KEYS,
    TOOL_BACKENDS,
    external_command,
    parse_external,
)
from commbench.jobs.profile import JOBS_DIR, Profile, environ_name
from commbench.jobs.syntax import NAME_RE, parse_walltime
from commbench.kernels.registry import BACKENDS, COLLECTIVES, implementations
from commbench.units import format_size, parse_size

EXPERIMENTS_FILE = JOBS_DIR / "experiments.toml"


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
    inplace: str | None = None
    external: list[str] | None = None


class StepTable(StepOverride):
    """One ``[[NAME.steps]]`` table of ``jobs/experiments.toml``: a ``commbench run``
    sweep (``collective``, ``impls``), or ``command = "calibrate"`` (``commbench
    calibrate``: the system's profile measured, written next to the results)."""

    command: Literal["run", "calibrate"] = "run"
    collective: str = ""
    impls: dict[str, list[str]] = {}
    by_system: dict[str, StepOverride] = {}


class ExperimentTable(BaseModel):
    """One ``[NAME]`` of ``jobs/experiments.toml``; its steps are checked one by one."""

    model_config = STRICT

    description: str
    walltime: str
    steps: list[dict[str, Any]] = Field(min_length=1)


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
    inplace: str | None = None  # --inplace 0|1|both
    external: tuple[str, ...] = ()  # "TOOL" or "TOOL:BINARY" (commbench.jobs.external)
    by_system: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    command: str = "run"  # or "calibrate": `commbench calibrate`, no collective

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
    if step.command == "calibrate":
        if step.collective or step.impls or step.external or step.workload:
            raise UsageError(f"{where}: a calibrate step takes no collective, impls, "
                             "external or workload (it runs microbenchmarks only)")  # fmt: skip
        return step
    if step.collective not in COLLECTIVES:
        raise UsageError(f"{where}: collective must be one of {', '.join(COLLECTIVES)}")
    for backend, names in step.impls.items():
        if backend not in BACKENDS:
            raise UsageError(f"{where}: impls has unknown backend {backend!r}")
        for n in names:
            if not NAME_RE.match(n):
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
    if step.inplace not in (None, "0", "1", "both"):
        raise UsageError(f'{where}: inplace must be "0", "1" or "both"')
    if step.inplace not in (None, "0"):
        from commbench.harness.collectives import IN_PLACE

        if step.collective not in IN_PLACE:
            raise UsageError(f"{where}: inplace applies to {', '.join(IN_PLACE)}")
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
    table = parse(StepTable, data, where)
    by_system = {}
    for system, over in table.by_system.items():
        if over.collective is not None:
            raise UsageError(
                f"{where} [by_system] [{system}]: the collective cannot change per system"
            )
        by_system[system] = _step_fields(over, f"{where} [by_system] [{system}]")
    impls = {backend: tuple(names) for backend, names in table.impls.items()}
    fields = {"collective": "", **_step_fields(table, where)}
    step = _validate_step(Step(impls=impls, by_system=by_system, **fields), where)
    for system in by_system:
        step.for_system(system)
    return step


def load_experiments(path: Path = EXPERIMENTS_FILE) -> dict[str, Experiment]:
    """Every experiment in ``jobs/experiments.toml``, validated."""
    out = {}
    for name, data in load_toml(path).items():
        where = f"{path} [{name}]"
        if not NAME_RE.match(name):
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
    return {(s.collective, s.name): tuple(s.backends) for s in implementations()}


@dataclass(frozen=True)
class RunCommand:
    name: str  # also the log file's stem: "01-allreduce-nvrar"
    collective: str
    impl: str
    args: tuple[str, ...]  # after `python -m commbench COMMAND`
    command: str = "run"  # or "calibrate"


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
    backend = profile.devices.backend
    for step in experiment.steps:
        step = step.for_system(profile.name)
        for entry in step.external:
            tool, binary = parse_external(entry, step.collective)
            if binary is None:
                skipped.append(f"{step.collective} {tool}: {tool} has no {step.collective} test")
                continue
            if backend not in TOOL_BACKENDS[tool]:
                skipped.append(f"{step.collective} {tool}: does not run on {backend}")
                continue
            from commbench.harness.backends.dtypes import parse_dtype
            from commbench.kernels.dtypes import dtype_name

            dtype = dtype_name(parse_dtype(step.dtype)) if step.dtype else None
            # OSU's all-to-all and all-gather sizes are per peer; commbench's (and
            # nccl-tests') the whole buffer
            per = alloc.ntasks if tool == "osu" and step.collective in OSU_PER_PEER else 1
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
                backend=backend,
                osu_device=site.get("osu_device", ""),
            )
            name = f"{first_index + len(runs):02d}-{step.collective}-{_slug(tool)}-{binary}"
            key = SITE_KEYS[tool]
            folder = site.get(key, "")
            reason = (
                ""
                if folder
                else f"{tool} not configured: set {environ_name(key)}, --set {key}=DIR "
                f"or {key} in the site file"
            )
            import_args = [tool, f"logs/{name}.log", "--binary", binary, "--out", results_file]
            import_args += ["--nranks", str(alloc.ntasks), "--nodes", str(alloc.nodes)]
            import_args += ["--backend", backend]
            if backend != "cpu":
                import_args += ["--gpus-per-node", str(profile.devices.gpus_per_node)]
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
    if step.inplace:
        args += ["--inplace", step.inplace]
    if step.workload:
        args += ["--workload", step.workload]
    return [*args, "--out", out]


def plan_runs(
    experiment: Experiment,
    profile: Profile,
    available: Mapping[tuple[str, str], tuple[str, ...]],
    results_file: str,
    repeat: int = 1,
) -> tuple[list[RunCommand], list[str]]:
    """The runs of ``experiment`` on ``profile``, and the implementations skipped (why).

    ``repeat`` K > 1: each step's implementations run K times, interleaved (A B C A B C),
    each run with ``--launch k`` so that its records merge into one interval per point.
    """
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: give a count >= 1")
    runs, skipped = [], []
    backend = profile.devices.backend
    gpn = profile.devices.gpus_per_node if profile.emulated else None
    for step in experiment.steps:
        step = step.for_system(profile.name)
        if step.command == "calibrate":
            out = str(Path(results_file).with_name(f"calibrated-{profile.name}.toml"))
            args = ["--out", out, "--base", profile.name]
            if gpn is not None:
                args += ["--gpus-per-node", str(gpn)]
            runs.append(RunCommand(f"{len(runs) + 1:02d}-calibrate", "calibrate", "",
                                   tuple(args), "calibrate"))  # fmt: skip
            continue
        planned = []
        for impl in step.impls.get(backend, ()):
            backends = available.get((step.collective, impl))
            if backends is None:
                skipped.append(f"{step.collective} {impl}: not registered")
                continue
            if backend not in backends:
                skipped.append(
                    f"{step.collective} {impl}: does not run on {backend} "
                    f"(runs on {','.join(backends)})"
                )
                continue
            planned.append((impl, step_args(step, impl, backend, gpn, results_file)))
        for k in range(1, repeat + 1):
            for impl, args in planned:
                name = f"{len(runs) + 1:02d}-{step.collective}-{_slug(impl)}"
                if repeat > 1:
                    name, args = f"{name}-r{k}", [*args, "--launch", str(k)]
                runs.append(RunCommand(name, step.collective, impl, tuple(args)))
    if not runs:
        why = "; ".join(skipped) or f"no implementations listed for backend {backend}"
        raise UsageError(
            f"experiment {experiment.name} has nothing to run on {profile.name}: {why}"
        )
    return runs, skipped
