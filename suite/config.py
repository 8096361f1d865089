"""Typed configuration: TOML tables parsed into pydantic models.

:func:`parse` validates one table against a model and turns pydantic's report into one
line that names the file, the table and the key (``jobs/emulated/x.toml: nodes: must be
an integer, not 'two'``). Models forbid unknown keys and never coerce between types (a
quoted number stays an error), like the TOML they read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import pydantic

from suite.errors import UsageError

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


def _message(err: Mapping[str, Any]) -> str:
    kind = err["type"]
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in _KIND:
        return f"{_KIND[kind]}, not {err['input']!r}"
    text = str(err["msg"]).removeprefix("Value error, ")
    return text.replace("Input should be", "must be", 1)


def parse(model: type[M], data: Any, where: str, **extra: Any) -> M:
    """``model`` from the TOML table ``data`` (plus ``extra`` fields the file does not
    hold), or :class:`UsageError` naming ``where`` (file and table) and the key."""
    if not isinstance(data, Mapping):
        raise UsageError(f"{where}: expected a table, not {data!r}")
    try:
        return model.model_validate({**data, **extra})
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            problems.append(f"{key}: {_message(err)}" if key else _message(err))
        raise UsageError(f"{where}: {'; '.join(problems)}") from None
