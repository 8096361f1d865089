"""Site values: what a user supplies for a system (account, HCA names, ...) and the site file.

A value comes from a flag (``--set NAME=V``), ``COMMBENCH_NAME``, the user's site file
(``~/.config/commbench/site.toml``, one table per system) or the profile's default, in
that order (:func:`resolve_site`). The site file may also change a system's modules,
``pre_run``/``post_run``, extra ``sbatch`` options and limits (:func:`apply_site_file`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pydantic

from commbench.config import STRICT, load_toml, parse
from commbench.errors import UsageError
from commbench.jobs.profile import JOBS_DIR, Limit, Profile, Run, environ_name
from commbench.jobs.syntax import quote

DEFAULT_SITE_FILE = Path("~/.config/commbench/site.toml")
#: What a site file's ``[SYSTEM]`` may change of ``[run]`` (its limits: :class:`Limit`'s keys).
RUN_OVERRIDES = ("modules", "pre_run", "post_run", "extra_sbatch")
#: What a user's site file may set for a system besides its site keys.
SITE_FILE_EXTRAS = (*RUN_OVERRIDES, *Limit.model_fields)


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


def _site_file_model(profile: Profile) -> type[pydantic.BaseModel]:
    """The typed ``[SYSTEM]`` table of a site file: the profile's site keys (strings),
    :data:`RUN_OVERRIDES` (as in ``[run]``) and :class:`Limit`'s keys."""
    fields: dict[str, Any] = {key: (str | None, None) for key in profile.site_keys}
    fields.update({key: (Run.model_fields[key].annotation | None, None) for key in RUN_OVERRIDES})
    fields.update({key: (f.annotation, f) for key, f in Limit.model_fields.items()})
    return pydantic.create_model(f"SiteFile_{profile.name}", __config__=STRICT, **fields)


def apply_site_file(profile: Profile, table: Mapping, where: str) -> tuple[Profile, dict[str, str]]:
    """Apply a site file's ``[SYSTEM]`` table: returns the profile and its site values."""
    where = f"{where} [{profile.name}]"
    allowed = [*profile.site_keys, *SITE_FILE_EXTRAS]
    extra = sorted(set(table) - set(allowed)) if isinstance(table, Mapping) else []
    if extra:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(extra)} (allowed: {', '.join(allowed)})"
        )
    site = parse(_site_file_model(profile), table, where)

    def given(keys: Iterable[str]) -> dict[str, Any]:
        return {key: getattr(site, key) for key in keys if getattr(site, key) is not None}

    profile = profile.model_copy(
        update={
            "run": profile.run.model_copy(update=given(RUN_OVERRIDES)),
            "limits": profile.limits.model_copy(update=given(Limit.model_fields)),
        }
    )
    values = given(profile.site_keys)
    for opt in profile.run.extra_sbatch:
        profile.check_extra_option(opt, where)
    return profile, values


def placeholders(
    bindir: Path, jobs_dir: Path = JOBS_DIR, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The values of the placeholders :func:`expand` fills in."""
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
    keys = profile.site_keys
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise UsageError(
            f"{profile.name} has no site value {unknown[0]!r}: it takes {', '.join(sorted(keys))}"
        )
    values = {}
    for name, key in keys.items():
        for source in (given.get(name), environ.get(environ_name(name)), file_values.get(name)):
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
                f'set {environ_name(name)}, or put {name} = "..." under [{profile.name}] '
                f"in {DEFAULT_SITE_FILE}"
            )
        value = expand(value, places)
        quote(value)  # refuses newlines
        values[name] = value
    return values
