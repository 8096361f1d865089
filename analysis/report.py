"""One-file report: figures 1–8 inlined, best implementation per size and system, speed-ups.

HTML (default): a single self-contained page, every figure inlined as a base64 ``data:``
URI (PNG, or SVG with ``image_format="svg"``), no external links, so it can be mailed.
Markdown (``.md``): the same tables, figures written next to it in ``<stem>_files/``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import jinja2
import pandas as pd
from matplotlib.figure import Figure

from commbench.analysis.figures import render_all
from commbench.analysis.load import (
    load_all,
    load_raw_samples,
    load_reference,
    result_files,
    run_metadata,
)
from commbench.analysis.scorecard import scorecard
from commbench.analysis.stragglers import present_nodes, present_ranks, straggler_tables
from commbench.analysis.style import binary_label
from commbench.analysis.tables import (
    agreement_table,
    best_table,
    line_rate_table,
    line_rates,
    model_error_table,
    overhead_table,
    speedup_table,
)
from commbench.analysis.timeline import KIND_COLORS, load_timeline, timeline_breakdown, untraced

FORMATS = ("html", "md")

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; font-size: .82em; margin: .6em 0 1.4em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #555; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: .5em 1em; }
.meta td, .meta th { text-align: left; }
summary { cursor: pointer; margin: .8em 0; font-size: 1.1em; }
</style></head><body>
<h1>{{ title }}</h1>
<p>Generated {{ generated }} by <code>commbench report</code> from {{ nfiles }} result file(s):
{{ npoints }} measured/modelled point record(s) ({{ kinds }}) and {{ nschedules }} schedule
record(s). Curves are labelled <b>measured</b> (solid) or <b>modelled</b> (dashed); grey
"paper:" marks are the published numbers, never our measurements. Bands show the spread
(min–max over ranks and repetitions); error bars the 95% interval of the median
per-iteration time of the slowest rank (bootstrap over launches and iterations).</p>
{% if notes %}<div class="note">{% for n in notes %}<p>{{ n }}</p>{% endfor %}</div>{% endif %}
<h2>{{ scorecard.title }}</h2>
<p>{{ scorecard.text }}</p>
{% if scorecard.table %}{{ scorecard.table | safe }}{% else %}<p><i>{{ scorecard.empty }}</i></p>{% endif %}
<details><summary><b>Inputs</b></summary>
{{ inputs | safe }}
</details>
{% for section in sections %}
<details><summary><b>{{ section.title }}</b></summary>
{% if section.text %}<p>{{ section.text }}</p>{% endif %}
{% if section.table %}{{ section.table | safe }}{% else %}<p><i>{{ section.empty }}</i></p>{% endif %}
{% for more in section.more %}<p>{{ more.text }}</p>{{ more.table | safe }}{% endfor %}
</details>
{% endfor %}
<h2>Figures</h2>
{% for fig in figures %}
<figure id="{{ fig.name }}"><img alt="{{ fig.title }}" src="{{ fig.uri }}">
<figcaption>{{ fig.title }}{% if fig.empty %}: {{ fig.empty }}{% endif %}</figcaption></figure>
{% endfor %}
</body></html>
"""


def figure_data_uri(fig: Figure, image_format: str = "png") -> str:
    """The figure as a ``data:`` URI (base64 PNG or SVG)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=image_format, dpi=100)
    mime = "image/svg+xml" if image_format == "svg" else "image/png"
    return f"data:{mime};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _fmt_num(x: object, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return ""
    if isinstance(x, (int, float)):
        return f"{x:.0f}" if abs(x) >= 10**digits else f"{x:.{digits}g}"
    return str(x)


def _fmt_speedup(value: float, low: float, high: float) -> str:
    if not (isinstance(value, float) and math.isfinite(value)):
        return ""
    return f"{value:.2f}× ({low:.2f}–{high:.2f})"


def _nodes(nodes, gpn) -> str:
    if pd.isna(nodes):
        return ""
    return f"{int(nodes)}×{int(gpn)}" if not pd.isna(gpn) else f"{int(nodes)}"


def _nodes_column(table: pd.DataFrame) -> list[str]:
    return [_nodes(n, g) for n, g in zip(table["nodes"], table["gpus_per_node"], strict=True)]


def _workload_column(table: pd.DataFrame) -> pd.Series:
    return table["workload_key"].replace("", "-")


def _size_column(table: pd.DataFrame) -> pd.Series:
    return table["size_bytes"].map(binary_label)


def _interval_text(low: float, high: float, digits: int = 2, unit: str = "") -> str:
    ok = all(isinstance(v, float) and math.isfinite(v) for v in (low, high))
    return f"[{low:.{digits}f}, {high:.{digits}f}]{unit}" if ok else "n/a"


def _ci_column(table: pd.DataFrame, low: str, high: str, digits: int = 2, unit: str = "") -> list:
    return [
        _interval_text(float(lo), float(hi), digits, unit)
        for lo, hi in zip(table[low], table[high], strict=True)
    ]


def _tier_columns(table: pd.DataFrame) -> dict[str, list[str]]:
    """Where the bytes went (analysis.tiers): busiest NIC's and scale-up port's rate with
    its fraction of the profile's, and time over the lower bound."""

    def rate(value, frac) -> str:
        if not (isinstance(value, float) and math.isfinite(value)):
            return ""
        text = _fmt_num(value)
        return text + (f" ({frac:.0%})" if isinstance(frac, float) and math.isfinite(frac) else "")

    return {
        "busiest NIC (GB/s, % line)": [
            rate(v, f) for v, f in zip(table["nic_GBps"], table["nic_fraction"], strict=True)
        ],
        "busiest scale-up (GB/s, % line)": [
            rate(v, f)
            for v, f in zip(table["scaleup_GBps"], table["scaleup_fraction"], strict=True)
        ],
        "time / lower bound": table["time_over_lb"].map(lambda v: _fmt_num(v)).tolist(),
    }


def _spread_column(table: pd.DataFrame, name: str) -> list[str]:
    """``name`` with its ``name_low``-``name_high`` spread, as speed-ups."""
    cols = (table[name], table[f"{name}_low"], table[f"{name}_high"])
    return [_fmt_speedup(v, lo, hi) for v, lo, hi in zip(*cols, strict=True)]


def present_best(table: pd.DataFrame) -> pd.DataFrame:
    """The best-implementation table with readable columns."""
    return pd.DataFrame(
        {
            "kind": table["kind"],
            "system": table["system"],
            "nodes×GPUs": _nodes_column(table),
            "backend": table["backend"],
            "collective": table["collective"],
            "workload": _workload_column(table),
            "dtype": table["dtype"],
            "size": _size_column(table),
            "best": table["best"],
            "time (µs)": table["time_us"].map(_fmt_num),
            "95% CI (µs)": _ci_column(table, "time_ci_low", "time_ci_high", 1),
            "busbw (GB/s)": table["busbw_GBps"].map(_fmt_num),
            "runner-up": table["runner_up"].fillna(""),
            "lead (spread)": _spread_column(table, "lead"),
            "lead 95% CI": _ci_column(table, "lead_ci_low", "lead_ci_high", 2, "×"),
            **_tier_columns(table),
        }
    )


def present_speedups(table: pd.DataFrame) -> pd.DataFrame:
    """The speed-up table with readable columns."""
    return pd.DataFrame(
        {
            "kind": table["kind"],
            "system": table["system"],
            "nodes×GPUs": _nodes_column(table),
            "collective": table["collective"],
            "workload": _workload_column(table),
            "size": _size_column(table),
            "impl": table["impl"],
            "over": table["baseline"],
            "speed-up (spread)": _spread_column(table, "speedup"),
            "95% CI": _ci_column(table, "speedup_ci_low", "speedup_ci_high", 2, "×"),
            **_tier_columns(table),
        }
    )


def present_line_rates(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": table["system"],
            "nodes×GPUs": _nodes_column(table),
            "collective": table["collective"],
            "workload": _workload_column(table),
            "size": _size_column(table),
            "best": table["best"],
            "busbw (GB/s)": table["busbw_GBps"].map(_fmt_num),
            "NIC line rate (GB/s)": table["line_rate_GBps"].map(lambda v: _fmt_num(v) or "unknown"),
            "fraction": table["fraction"].map(lambda v: f"{v:.1%}" if math.isfinite(v) else "n/a"),
        }
    )


def present_model_error(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": table["system"],
            "nodes×GPUs": _nodes_column(table),
            "collective": table["collective"],
            "impl": table["series"],
            "workload": _workload_column(table),
            "size": _size_column(table),
            "measured (µs)": table["measured_us"].map(_fmt_num),
            "modelled (µs)": table["modelled_us"].map(_fmt_num),
            "modelled / measured": table["ratio"].map(lambda v: f"{v:.2f}"),
        }
    )


def present_agreement(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": table["system"],
            "run": table["run_id"],
            "ranks": table["nranks"],
            "collective": table["collective"],
            "size": _size_column(table),
            "commbench": table["impl"],
            "external": table["external"],
            "commbench (µs)": table["commbench_us"].map(_fmt_num),
            "external (µs)": table["external_us"].map(_fmt_num),
            "commbench / external": table["ratio"].map(lambda v: f"{v:.2f}"),
        }
    )


def present_overhead(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": table["system"],
            "run": table["run_id"],
            "ranks": table["nranks"],
            "collective": table["collective"],
            "impl": table["impl"],
            "timing": table["timing_mode"],
            "size": _size_column(table),
            "commbench (µs)": table["time_us"].map(_fmt_num),
            "C reference (µs)": table["reference_time_us"].map(_fmt_num),
            "commbench / C": table["ratio"].map(lambda v: f"{v:.2f}" if v == v else ""),
            "issuing (µs)": table["host_us"].map(_fmt_num),
            "timed loop": table["timed_loop"].fillna(""),
            "host-bound": table["host_bound"].map(lambda v: "host-bound" if v is True else ""),
        }
    )


def present_reference(ref: pd.DataFrame) -> pd.DataFrame:
    def what(row) -> str:
        if math.isfinite(row.value):
            return _fmt_num(row.value, 4)
        lo = _fmt_num(row.low, 4)
        return f"{lo}–{_fmt_num(row.high, 4)}" if lo else f"≤ {_fmt_num(row.high, 4)}"

    shown = ref[~ref["quantity"].isin(["nic_line_rate_GBps", "nic_payload_GBps", "scaleup_GBps"])]
    return pd.DataFrame(
        {
            "quantity": shown["quantity"],
            "impl": shown["impl"],
            "system": shown["system"],
            "value": [what(r) for r in shown.itertuples()],
            "unit": shown["unit"],
            "note": shown["note"].fillna(""),
            "source": shown["source"],
        }
    )


def _html_table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, escape=True, border=0, na_rep="") if not df.empty else ""


def _md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return ""

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in df.columns) + " |"]
    lines.append("|" + "---|" * len(df.columns))
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def present_timeline(table: pd.DataFrame) -> pd.DataFrame:
    """One row per point with a timeline: µs per call and rank in each kind of span."""
    if table.empty:
        return pd.DataFrame()
    keys = ["system", "nodes", "gpus_per_node", "collective", "impl", "size_bytes",
            "workload_key", "run_id", "launch_id", "point", "inplace"]  # fmt: skip
    table = table.assign(
        inplace=table["inplace"].fillna(0).astype(int), kind=table["kind"] + " (µs)"
    )  # a kind's column must not meet the point's own ("collective")
    wide = table.set_index([*keys, "kind"])["us_per_call"].unstack("kind").reset_index()
    wide = wide.dropna(subset=["call (µs)"])
    out = pd.DataFrame(
        {
            "system": wide["system"],
            "nodes×GPUs": _nodes_column(wide),
            "collective": wide["collective"],
            "impl": wide["impl"],
            "size": _size_column(wide),
            "workload": _workload_column(wide),
        }
    )
    for kind in ("call", *(k for k in KIND_COLORS if k != "call"), "other"):
        if f"{kind} (µs)" in wide.columns:
            out[f"{kind} (µs)"] = [_fmt_num(x) for x in wide[f"{kind} (µs)"]]
    return out


def _timeline_section(points: pd.DataFrame) -> dict:
    return {
        "title": "Where the time goes (--timeline)",
        "text": "Points run with `commbench run --timeline`: the mean time per call and rank "
        "spent posting sends and receives, waiting for them (or for a partner's data), "
        "copying, reducing, packing, in library collectives and scheduling; other = the "
        "call's time outside the algorithm's spans (the harness's own stamps). Library "
        "baselines have only the call. Figure 8 draws one call per rank.",
        "table": present_timeline(timeline_breakdown(load_timeline(points))),
        "empty": "no point was run with --timeline",
    }


def present_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": runs["run_id"],
            "folder": runs["folder"],
            "system": runs["system"],
            "kind": runs["kind"],
            "backend": runs["backend"],
            "nodes×GPUs": _nodes_column(runs),
            "records": runs["records"],
            "impls": runs["impls"],
            "started": runs["first"],
            "git": runs["git_sha"],
            "versions": runs["versions"],
            "job": runs["job"],
        }
    )


def _scorecard_section(points, schedules, ref) -> dict:
    return {
        "title": "Reproduction scorecard",
        "text": "Each headline claim of the two papers, the paper's number and ours, one row "
        "per source (measured on a GPU, measured with the CPU backend on this machine or the "
        "emulated cluster, or modelled by the cost model) and configuration: FAST tuned by "
        "the model or not, its per-call costs (matrix all-gather, synthesis) in the time or "
        "not, the modelled flow control, which baselines were there to be the best, the "
        "workloads and sizes; for synthesis, one call timed (cold) or the median of repeated "
        "calls (warm). Rows of one claim whose numbers differ differ in one of these. "
        "Speed-ups come from commbench compare (the best baseline at each point against "
        "the implementation): the claim holds at 95 % when the speed-up's interval lies in "
        "the paper's band (on a fabric the paper did not measure: when FAST is faster), does "
        "not hold when it lies outside, and cannot tell otherwise. Claims with no matching "
        "records in these results are left out; the long tables below are folded.",
        "table": scorecard(points, schedules, ref),
        "empty": "no records bear on the papers' claims",
    }


def _sections(points, ref, rates) -> list[dict]:
    return [
        {
            "title": "Runs",
            "text": "One row per run, system and kind (measured / modelled): its layout, "
            "software versions and, for batch jobs, the job's sentinel (ready / error) found "
            "next to its results.",
            "table": present_runs(run_metadata(points)),
            "empty": "no runs",
        },
        {
            "title": "Best implementation per size and system",
            "text": "Fastest implementation at each point (median chosen time over repetitions); "
            "lead = its speed-up over the runner-up, with the spread over repetitions and ranks "
            "and the 95% interval of the ratio of the median per-iteration times (bootstrap "
            "over launches and iterations; n/a where a side has fewer than two samples). "
            "Busiest NIC / scale-up: the most loaded link of each tier (bytes per call over "
            "the time) and its share of the profile's rate; time / lower bound: what no "
            "algorithm beats on that fabric.",
            "table": present_best(best_table(points)),
            "empty": "no result points",
        },
        {
            "title": "Speed-ups over the baseline",
            "text": "Baseline: NCCL, else RCCL, else MPI for all-reduce; fan-out for all-to-all(v). "
            "Spread: min–max of the per-rank and per-repetition ratios. 95% CI: the bootstrap "
            "interval of the ratio of the two median per-iteration times; a speed-up holds at "
            "95% when the whole interval is above 1. Tier columns are the implementation's.",
            "table": present_speedups(speedup_table(points)),
            "empty": "no point has both a baseline and another implementation",
        },
        {
            "title": "Fraction of NIC line rate (measured)",
            "text": "Best busbw at the largest size per system, over one NIC's line rate "
            "(results/reference/systems.csv, or --line-rate SYSTEM=GBPS).",
            "table": present_line_rates(line_rate_table(points, rates)),
            "empty": "no measured points",
        },
        {
            "title": "Cost model vs measurement",
            "text": "Points both measured and modelled: the model's error.",
            "table": present_model_error(model_error_table(points)),
            "empty": "no point was both measured and modelled",
        },
        {
            "title": "Agreement with nccl-tests / rccl-tests / OSU",
            "text": "commbench's mpi, nccl and rccl against the tools people trust, measured "
            "in the same run (commbench import): median times at the same bytes and ranks; "
            "1.00 means they agree, above 1 commbench is slower.",
            "table": present_agreement(agreement_table(points)),
            "empty": "no external baseline measured next to commbench in the same run "
            "(set the nccl_tests / rccl_tests / osu site values)",
        },
        {
            "title": "Overhead against C, and host-bound points",
            "text": "Points run with --reference c: the MPI library's own collective timed "
            "from C on the same buffers, the same way (commbench / C = what the harness and "
            "a Python-level algorithm add over the library). A GPU point is host-bound when "
            "issuing a call took as long as the call: it measures Python, not the fabric.",
            "table": present_overhead(overhead_table(points)),
            "empty": "no point carries a C reference (commbench run --reference c) and "
            "none was host-bound",
        },
        _stragglers_section(points),
        _timeline_section(points),
        {
            "title": "The papers' numbers (reference, not ours)",
            "text": "From results/reference/*.csv; each row names its source.",
            "table": present_reference(ref) if not ref.empty else pd.DataFrame(),
            "empty": "no reference data found",
        },
    ]


def _stragglers_section(points: pd.DataFrame) -> dict:
    ranks, nodes = straggler_tables(points, load_raw_samples(points))
    return {
        "title": "Stragglers",
        "text": "Per node of each layout: how often one of its ranks was the slowest, of the "
        "measured points with per-rank times (each rank's mean time) and of the iterations "
        "with per-rank samples (latency mode, imported -I runs), and its mean lead over the "
        "median rank when it was. Under skewed all-to-all(v) the rank with the most bytes "
        "is slowest by design.",
        "table": present_nodes(nodes) if not ranks.empty else pd.DataFrame(),
        "empty": "no measured record with per-rank times on 2 or more ranks",
        "more": [
            {
                "text": "Per rank: the ranks that were the slowest at least once, most often "
                "first.",
                "table": present_ranks(ranks),
            }
        ]
        if not ranks.empty
        else [],
    }


def write_report(
    paths: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    fmt: str | None = None,
    reference_dir: str | os.PathLike | None = None,
    rates: Mapping[str, float] | None = None,
    image_format: str = "png",
    title: str = "commbench report",
) -> Path:
    """Load every result under ``paths`` and write the report to ``out``; returns its path.

    ``fmt`` defaults from the suffix (``.md`` -> Markdown, else HTML).
    """
    out = Path(out)
    fmt = fmt or ("md" if out.suffix.lower() in (".md", ".markdown") else "html")
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}: use html or md")
    if image_format not in ("png", "svg"):
        raise ValueError(f"unknown image format {image_format!r}: use png or svg")
    files = result_files(paths)
    points, schedules = load_all(*paths)
    ref = load_reference(reference_dir)
    known = line_rates(ref, rates)
    rendered = render_all(points, schedules, None, reference=ref, rates=rates)
    notes = []
    if points.empty and schedules.empty:
        notes.append(
            f"No result records found in {', '.join(str(p) for p in paths)}: run `make run` "
            "or `commbench run ...` first. The figures below say what each one needs."
        )
    nwrong = int(pd.to_numeric(points["nwrong"], errors="coerce").fillna(0).sum())
    if nwrong:
        notes.append(
            f"{nwrong} wrong element(s) reported by correctness checks: see the #wrong column of the runs."
        )
    sections = _sections(points, ref, known)
    card = _scorecard_section(untraced(points), schedules, ref)
    inputs = _inputs_table(points, schedules, files)
    out.parent.mkdir(parents=True, exist_ok=True)
    common = {
        "title": title,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "nfiles": len(files),
        "npoints": len(points),
        "nschedules": len(schedules),
        "kinds": ", ".join(f"{k} {n}" for k, n in points["kind"].value_counts().items())
        if not points.empty
        else "none",
        "notes": notes,
    }
    if fmt == "html":
        figures = [
            {
                "name": r.spec.name,
                "title": f"Figure {r.spec.number}",
                "uri": figure_data_uri(r.figure, image_format),
                "empty": r.empty,
            }
            for r in rendered
        ]
        env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
        page = env.from_string(_TEMPLATE).render(
            **common,
            inputs=_html_table(inputs),
            scorecard={**card, "table": _html_table(card["table"])},
            sections=[
                {
                    **s,
                    "table": _html_table(s["table"]),
                    "more": [{**m, "table": _html_table(m["table"])} for m in s.get("more", [])],
                }
                for s in sections
            ],
            figures=figures,
        )
        out.write_text(page, encoding="utf-8")
        return out
    assets = out.with_name(out.stem + "_files")
    assets.mkdir(exist_ok=True)
    lines = [
        f"# {title}",
        "",
        f"Generated {common['generated']} from {len(files)} result file(s): "
        f"{len(points)} point record(s) ({common['kinds']}), {len(schedules)} schedule record(s). "
        'Measured curves are solid, modelled dashed; "paper:" marks are published numbers, '
        "not ours; bands are min–max over ranks and repetitions, error bars 95% intervals.",
        "",
    ]
    lines += [f"> {n}" for n in notes] + ([""] if notes else [])
    lines += [f"## {card['title']}", "", card["text"], ""]
    lines += [_md_table(card["table"]) or f"*{card['empty']}*", ""]
    for s in [{"title": "Inputs", "text": "", "table": inputs, "empty": "no inputs"}, *sections]:
        lines += [
            f"<details><summary><b>{s['title']}</b></summary>",
            "",
            s["text"],
            "",
            _md_table(s["table"]) or f"*{s['empty']}*",
            "",
            *[
                line
                for m in s.get("more", [])
                for line in (m["text"], "", _md_table(m["table"]), "")
            ],
            "</details>",
            "",
        ]
    lines += ["## Figures", ""]
    for r in rendered:
        name = f"{r.spec.name}.{image_format}"
        r.figure.savefig(assets / name, dpi=100)
        caption = f"Figure {r.spec.number}" + (f": {r.empty}" if r.empty else "")
        lines += [
            f"![{html.escape(caption)}]({assets.name}/{name})",
            "",
            caption.replace("\n", " "),
            "",
        ]
    out.write_text("\n".join(lines), encoding="utf-8")
    return out


def _inputs_table(
    points: pd.DataFrame, schedules: pd.DataFrame, files: Sequence[Path]
) -> pd.DataFrame:
    """One row per input file: records, systems, runs and git revisions."""
    rows = []
    for f in files:
        part = points[points["source_file"] == str(f)]
        rows.append(
            {
                "file": str(f),
                "records": len(part),
                "schedule records": int((schedules["source_file"] == str(f)).sum()),
                "systems": ", ".join(sorted({str(s) for s in part["system"].dropna()})),
                "kinds": ", ".join(sorted(set(part["kind"]))),
                "runs": part["run_id"].nunique(),
                "git": ", ".join(sorted({str(s) for s in part["git_sha"].dropna()})),
            }
        )
    return pd.DataFrame(rows)
