"""Figures, tables and reports from commbench result records.

Public API (imported lazily, so ``import commbench.analysis`` costs nothing until used)::

    from commbench.analysis import load_all, load_results, load_schedules, load_reference, run_metadata
    from commbench.analysis import figure_1, ..., figure_8, render_all, FIGURES
    from commbench.analysis import load_timeline, timeline_breakdown, exchange_lateness
    from commbench.analysis import best_table, speedup_table, line_rate_table, model_error_table
    from commbench.analysis import straggler_tables, write_report, execute_notebook

Record schemas: :mod:`commbench.analysis.load`. Conventions: :mod:`commbench.analysis.style`.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "load_all": "commbench.analysis.load",
    "load_results": "commbench.analysis.load",
    "load_schedules": "commbench.analysis.load",
    "load_reference": "commbench.analysis.load",
    "run_metadata": "commbench.analysis.load",
    "result_files": "commbench.analysis.load",
    "FIGURES": "commbench.analysis.figures",
    "figure_1": "commbench.analysis.figures",
    "figure_2": "commbench.analysis.figures",
    "figure_3": "commbench.analysis.figures",
    "figure_4": "commbench.analysis.figures",
    "figure_5": "commbench.analysis.figures",
    "figure_6": "commbench.analysis.figures",
    "figure_7": "commbench.analysis.figures",
    "figure_8": "commbench.analysis.timeline",
    "load_timeline": "commbench.analysis.timeline",
    "timeline_breakdown": "commbench.analysis.timeline",
    "exchange_lateness": "commbench.analysis.timeline",
    "render_all": "commbench.analysis.figures",
    "empty_message": "commbench.analysis.figures",
    "best_table": "commbench.analysis.tables",
    "speedup_table": "commbench.analysis.tables",
    "line_rate_table": "commbench.analysis.tables",
    "line_rates": "commbench.analysis.tables",
    "model_error_table": "commbench.analysis.tables",
    "summarise": "commbench.analysis.tables",
    "straggler_tables": "commbench.analysis.stragglers",
    "write_report": "commbench.analysis.report",
    "execute_notebook": "commbench.analysis.notebooks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'commbench.analysis' has no attribute {name!r}")
