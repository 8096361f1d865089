"""Run the analysis notebooks top to bottom with new input paths (papermill-style).

Each notebook has one code cell tagged ``parameters`` holding its defaults (``RESULTS``,
``OUT``, ``REFERENCE``); :func:`execute_notebook` inserts a cell after it that overrides
them, then runs every cell in a fresh kernel. A failing cell raises
``nbclient.exceptions.CellExecutionError`` with the cell's traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path

NOTEBOOK_DIR = Path(str(files("commbench.analysis")))
NOTEBOOKS = (
    "nvrar_latency",
    "fast_skew",
    "scheduler_scaling",
    "interconnects",
    "model_predictions",
)
PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"


def _literal(value: object) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, (list, tuple)) and all(_literal(v) for v in value)


def inject_parameters(nb, parameters: Mapping[str, object]):
    """Insert (or replace) the cell that overrides the ``parameters`` cell's values."""
    import nbformat

    if not parameters:
        return nb
    for name, value in parameters.items():
        if not _literal(value):
            raise ValueError(
                f"notebook parameter {name}={value!r}: use str, number, bool, None or lists of them"
            )
    source = "# Parameters injected by commbench.analysis.notebooks.execute_notebook\n" + "\n".join(
        f"{name} = {value!r}" for name, value in parameters.items()
    )
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [INJECTED_TAG]})
    cells = [c for c in nb.cells if INJECTED_TAG not in c.get("metadata", {}).get("tags", [])]
    where = next(
        (
            i + 1
            for i, c in enumerate(cells)
            if PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])
        ),
        None,
    )
    if where is None:
        raise ValueError("the notebook has no cell tagged 'parameters' to override")
    cells.insert(where, cell)
    nb.cells = cells
    return nb


def execute_notebook(
    path: str | os.PathLike,
    parameters: Mapping[str, object] | None = None,
    *,
    output: str | os.PathLike | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: int = 300,
    kernel_name: str = "python3",
):
    """Execute ``path`` with ``parameters``; returns the executed notebook (and saves it to
    ``output`` when given). The kernel starts in ``cwd`` (default: the notebook's folder)."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, parameters or {})
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    client.execute()
    if output is not None:
        nbformat.write(nb, output)
    return nb
