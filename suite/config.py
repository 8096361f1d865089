"""Typed configuration: TOML tables parsed into pydantic models.

:func:`parse` validates one table against a model and turns pydantic's report into one
line that names the file, the table and the key (``jobs/emulated/x.toml: nodes: must be
an integer, not 'two'``). Models forbid unknown keys and never coerce between types (a
quoted number stays an error), like the TOML they read: their ``model_config`` is
:data:`STRICT` (defined with the lowest such model, the profiles' ``[fabric]`` table of the
cost model, :class:`commbench.kernels.model.fabric_table.FabricTable`).
"""

from __future__ import annotations

import re
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

from commbench.errors import UsageError
from commbench.kernels.model.fabric_table import STRICT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["STRICT", "load_toml", "parse"]

M = TypeVar("M", bound=pydantic.BaseModel)

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
    text = re.sub(r"^[A-Z][a-z]* should ", "must ", str(err["msg"]).removeprefix("Value error, "))
    return f"{key} {text}" if key else text


def load_toml(path: Path) -> dict:
    """The TOML file ``path`` as a dict; a syntax error is a :class:`UsageError`."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None


def parse(model: type[M], data: Any, where: str, **extra: Any) -> M:
    """``model`` from the TOML table ``data`` (plus ``extra`` fields the file does not
    hold), or :class:`UsageError` naming ``where`` (file and table), the sub-table (a field
    that is a model: `` [fabric]``, `` [site] [account]``) and the key."""
    if not isinstance(data, Mapping):
        raise UsageError(f"{where}: expected a table, not {data!r}")
    try:
        return model.model_validate({**data, **extra})
    except pydantic.ValidationError as exc:
        groups = _problems(model, exc.errors())
        text = "; ".join(f"{where}{table}: {'; '.join(p)}" for table, p in groups.items())
        raise UsageError(text) from None


#: What pydantic appends to an error's location for each member of a union (``int | str``).
_UNION_MEMBERS = {"int", "str", "float", "bool"}
#: Errors a validator raised (about the value at the location, or a whole table).
_VALIDATOR_ERRORS = {"value_error", "assertion_error"}


def _problems(model: type[BaseModel], errors: list) -> dict[str, list[str]]:
    """Messages by sub-table, one per key; a value that fits no member of a union is one
    message too (``min must be an integer or a string, not True``)."""
    by_key: dict[tuple[str, str], list] = {}
    for err in errors:
        loc = [str(p) for p in err["loc"]]
        while len(loc) > 1 and loc[-1] in _UNION_MEMBERS:
            loc.pop()
        by_key.setdefault(_locate(model, loc, err["type"]), []).append(err)
    out: dict[str, list[str]] = {}
    for (table, key), errs in by_key.items():
        kinds = [_KIND[e["type"]].removeprefix("must be ") for e in errs if e["type"] in _KIND]
        if len(errs) > 1 and len(kinds) == len(errs):
            problems = [f"{key} must be {' or '.join(kinds)}, not {errs[0]['input']!r}"]
        else:
            problems = [_message(key, e) for e in errs]
        out.setdefault(table, []).extend(problems)
    return out


def _locate(model: type[BaseModel] | None, loc: list[str], kind: str) -> tuple[str, str]:
    """``(sub-table, key)`` of an error at ``loc``: the location goes into a field that
    is a model (``[fabric]``) or a table of them (``[site] [account]``) when the error is
    inside it, and into any table when a validator refused the table as a whole."""
    table, i = "", 0
    while model is not None and i < len(loc) and loc[i] in model.model_fields:
        sub, of_tables = _sub_table(model.model_fields[loc[i]].annotation)
        rest = len(loc) - i - 1
        whole = kind in _VALIDATOR_ERRORS
        if sub is not None and not of_tables and (rest or whole):
            table, i = f"{table} [{loc[i]}]", i + 1
        elif sub is not None and of_tables and (rest > 1 or (rest == 1 and whole)):
            table, i = f"{table} [{loc[i]}] [{loc[i + 1]}]", i + 2
        elif of_tables and not rest and whole:
            table, i = f"{table} [{loc[i]}]", i + 1
            break
        else:
            break
        model = sub
    return table, ".".join(loc[i:])


def _sub_table(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """``(model, False)`` for a field holding a model (optional or not), ``(model, True)``
    for a table of them, ``(None, True)`` for any other table, else ``(None, False)``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (dict, Mapping):
        value = args[1]
        return (value if isinstance(value, type) and issubclass(value, BaseModel) else None), True
    if len(args) == 1 and origin in (typing.Union, types.UnionType):
        return _sub_table(args[0])
    return None, False
