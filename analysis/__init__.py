"""Figures, tables and reports from commbench result records.

Public API (imported lazily, so ``import analysis`` costs nothing until used)::

    from analysis import load_all, load_results, load_schedules, load_reference, run_metadata
    from analysis import figure_1, ..., figure_7, render_all, FIGURES
    from analysis import best_table, speedup_table, line_rate_table, model_error_table
    from analysis import write_report, execute_notebook

Record schemas: :mod:`analysis.load`. Conventions: :mod:`analysis.style`.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "load_all": "analysis.load",
    "load_results": "analysis.load",
    "load_schedules": "analysis.load",
    "load_reference": "analysis.load",
    "run_metadata": "analysis.load",
    "result_files": "analysis.load",
    "FIGURES": "analysis.figures",
    "figure_1": "analysis.figures",
    "figure_2": "analysis.figures",
    "figure_3": "analysis.figures",
    "figure_4": "analysis.figures",
    "figure_5": "analysis.figures",
    "figure_6": "analysis.figures",
    "figure_7": "analysis.figures",
    "render_all": "analysis.figures",
    "empty_message": "analysis.figures",
    "best_table": "analysis.tables",
    "speedup_table": "analysis.tables",
    "line_rate_table": "analysis.tables",
    "line_rates": "analysis.tables",
    "model_error_table": "analysis.tables",
    "summarise": "analysis.tables",
    "write_report": "analysis.report",
    "execute_notebook": "analysis.notebooks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
