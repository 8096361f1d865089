"""``commbench report RESULTS... -o report.html``: one self-contained page of figures and tables.

The work is done by the :mod:`analysis` package; this module only registers the
sub-command (see :func:`analysis.cli.add_report_arguments` for the options).
"""

from __future__ import annotations


def add_parser(sub) -> None:
    from analysis.cli import add_report_arguments, run_report

    p = sub.add_parser(
        "report",
        help="write one self-contained HTML (or Markdown) report from result files",
        description="Load every result file (*.jsonl) given or found under the given "
        "directories and write one page: figures 1-7 inlined, the best implementation per "
        "size and system, speed-ups with their spread, fraction of NIC line rate, cost-model "
        "error and the papers' reference numbers.",
    )
    add_report_arguments(p)
    p.set_defaults(func=run_report)
