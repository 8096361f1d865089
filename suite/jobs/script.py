"""The batch script of one job: a Jinja2 template per launcher, rendered from a profile,
an experiment, an allocation and the site values.

Templates (``jobs/templates/LAUNCHER.sh.j2``) render in a ``StrictUndefined``
environment whose ``finalize`` shell-quotes every value
(:func:`commbench.jobs.syntax.shell_finalize`): a template cannot emit an unquoted value
by accident. :func:`render_job` is pure; :func:`write_job` writes the script.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.errors import UsageError
from commbench.jobs.allocation import Allocation, sbatch_options, validate_allocation
from commbench.jobs.experiments import Experiment, RunCommand, plan_external, plan_runs
from commbench.jobs.profile import JOBS_DIR, Profile
from commbench.jobs.runs import RESULTS_NAME, SCRIPT_NAME, check_run_id
from commbench.jobs.site import expand, placeholders
from commbench.jobs.syntax import Shell, format_sbatch_option, shell_finalize

if TYPE_CHECKING:
    import jinja2

TEMPLATES_DIR = JOBS_DIR / "templates"


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


def template_environment(templates_dir: Path = TEMPLATES_DIR) -> jinja2.Environment:
    """The templates' environment: undefined names are errors, every value is quoted."""
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
    if not profile.emulated and alloc.tasks_per_node < profile.devices.gpus_per_node:
        env.update(profile.env_partial_node)
    for name, key in profile.site_keys.items():
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
    repeat: int = 1,
) -> Job:
    """The batch script for one allocation (pure: writes nothing).

    ``bindir`` is the ``bin`` directory of the Python environment the jobs use, with
    commbench installed (``{bin}``), ``jobs_dir`` where they find commbench's job files
    (``{jobs}``). ``repeat``: launches per implementation, interleaved (:func:`plan_runs`).
    """
    places = placeholders(bindir, jobs_dir)
    check_run_id(run_id)
    launchers = profile.launch.launchers
    launcher = launcher or profile.launch.default
    if launcher not in launchers:
        raise UsageError(
            f"{profile.name} does not launch with {launcher!r}: use {', '.join(sorted(launchers))}"
        )
    validate_allocation(profile, alloc, site)
    run_dir = Path(results_root) / profile.name / run_id
    results_file = str(run_dir / RESULTS_NAME)
    runs, skipped = plan_runs(experiment, profile, available, results_file, repeat)
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
    spec = launchers[launcher]
    calibration = None
    cal = profile.calibration
    if cal and alloc.multinode and not profile.emulated:
        calibration = {
            "pattern": cal.pattern,
            "args": [cal.collective, "--impl", cal.impl, "--backend", profile.devices.backend]
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
        "modules": list(profile.run.modules),
        "env": _env_lines(profile, alloc, site),
        "pre_run": [Shell(line) for line in profile.run.pre_run],
        "post_run": [Shell(line) for line in profile.run.post_run],
        "launch_command": expand(spec.command or launcher, places),
        "launch_options": list(spec.options),
        "launch_wrapper": [expand(w, places) for w in spec.wrapper],
        "calibration": calibration,
        "runs": [{"name": r.name, "command": r.command, "args": list(r.args)} for r in runs],
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
