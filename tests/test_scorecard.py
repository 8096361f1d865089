"""The scorecard's rows on constructed records: one row per claim, source and configuration,
speed-ups from ``compare`` with holds / does not hold / cannot tell at 95 %, synthesis rows
that say cold or warm, and the model validation's rows with their configuration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from commbench.analysis import scorecard as sc
from commbench.analysis.load import load_all, load_reference
from tests.test_analysis_data import write_jsonl

MiB = 1 << 20


def rec(impl, time_us, *, workload="zipf:0.8", size=MiB, system="local", nodes=2, gpn=4,
        noise=0.0, n=20, seed=0, modelled=False, **extra) -> dict:  # fmt: skip
    """One all-to-allv record: ``n`` per-iteration samples around ``time_us`` (relative
    spread ``noise``; none modelled)."""
    rng = np.random.default_rng([seed, len(impl), size % 9973, int(time_us)])
    samples = time_us * (1 + noise * (rng.random(n) - 0.5))
    out = {
        "run_id": "r",
        "system": system,
        "collective": "alltoallv",
        "nodes": nodes,
        "gpus_per_node": gpn,
        "nranks": nodes * gpn,
        "backend": "model" if modelled else "cpu",
        "impl": impl,
        "params": {},
        "dtype": "uint8",
        "op": None,
        "size_bytes": size,
        "workload": workload,
        "seed": 1,
        "modelled": modelled,
        "time_us": float(time_us if modelled else np.median(samples)),
        "time_us_min": float(samples.min()),
        "time_us_avg": float(samples.mean()),
        "time_us_max": float(samples.max()),
        "time_reduction": "max",
        "info": {},
    }
    if not modelled:
        out["iter_time_us"] = [float(x) for x in samples]
    out.update(extra)
    return out


def card(tmp_path, records, name="r.jsonl") -> pd.DataFrame:
    write_jsonl(tmp_path / name, records)
    points, schedules = load_all(tmp_path / name)
    return sc.scorecard(points, schedules, load_reference())


def measured_rows(table: pd.DataFrame) -> pd.DataFrame:
    return table[~table["evidence"].str.startswith("modelled (model validation")]


def test_measured_rows_hold_fail_or_cannot_tell_from_compare(tmp_path):
    # FAST clearly faster than the best baseline at 1 MiB, clearly slower at 2 MiB, and
    # equal within the noise at 4 MiB; MPI is the best baseline at 2 MiB, fan-out elsewhere
    records = [rec("fast", 100), rec("fanout", 150), rec("mpi", 170),
               rec("fast", 200, size=2 * MiB), rec("fanout", 180, size=2 * MiB),
               rec("mpi", 150, size=2 * MiB),
               rec("fast", 300, size=4 * MiB, noise=0.4), rec("fanout", 300, size=4 * MiB, noise=0.4),
               rec("fanout", 50, workload="uniform")]  # fmt: skip
    rows = measured_rows(card(tmp_path, records))
    assert len(rows) == 1  # uniform traffic is not the claim's (skewed only)
    row = rows.iloc[0]
    assert row["claim"] == "FAST vs best baseline, skewed, other fabrics"
    assert row["evidence"] == "measured, CPU backend (local, 2×4)"
    assert row["configuration"] == (
        "per-call costs off (schedule made once per matrix, untimed); the scheduler's "
        "defaults; vs best of fan-out, MPI (best: fan-out at 2, MPI at 1); zipf:0.8 at "
        "1 MiB–4 MiB"
    )
    assert row["paper"].startswith("> 1×")
    assert row["ours"].startswith("0.75–1.50× (3 points); 95% CI ")
    assert row["ours"].endswith(
        "compare: 1 faster, 1 slower, 1 no difference; 3 of 3 on one launch a side"
    )
    assert row["verdict"] == (
        "FAST faster at 1 of 3 points; at 95 %: 1 holds, 1 does not hold, 1 cannot tell"
    )
    # one point alone: the whole verdict is that point's
    for size, verdict in ((MiB, "holds at 95 %"), (2 * MiB, "does not hold at 95 %"),
                          (4 * MiB, "cannot tell at 95 %")):  # fmt: skip
        one = [r for r in records if r["size_bytes"] == size and r["workload"] != "uniform"]
        row = measured_rows(card(tmp_path, one, f"{size}.jsonl")).iloc[0]
        assert row["verdict"].endswith("; " + verdict), row["verdict"]


def test_one_row_per_configuration_and_source(tmp_path):
    cluster = {"emulated_fabric": {"nic": "100mbit"}}
    records = [
        rec("fanout", 150), rec("fast", 100), rec("fast+sched", 160),
        rec("fast", 90, params={"stage_cost_bytes": 143461}),
        rec("fanout", 300, nodes=4, gpn=2, **cluster), rec("fast", 250, nodes=4, gpn=2, **cluster),
    ]  # fmt: skip
    rows = measured_rows(card(tmp_path, records)).set_index("configuration")
    assert list(rows["evidence"]) == ["measured, CPU backend (local, 2×4)"] * 3 + [
        "measured, CPU backend, emulated cluster (local, 4×2)"
    ]
    on = "per-call costs on (schedule made in every call); the scheduler's defaults"
    off = "per-call costs off (schedule made once per matrix, untimed)"
    tail = "; vs fan-out only; zipf:0.8 at 1 MiB"
    assert set(rows.index) == {on + tail, f"{off}; the scheduler's defaults{tail}",
                               f"{off}; options stage_cost_bytes=143461{tail}"}  # fmt: skip
    assert rows.loc[on + tail, "ours"].startswith("0.94× (1 points)")
    # a second launch of each side: no longer on one launch a side
    again = [dict(r, run_id="r2") for r in records]
    rows = measured_rows(card(tmp_path, records + again, "two.jsonl")).set_index("configuration")
    assert "one launch" in measured_rows(card(tmp_path, records)).iloc[0]["ours"]
    assert not rows["ours"].str.contains("one launch").any()
    assert rows.loc[on + tail, "verdict"].startswith("FAST faster at 0 of 1 points")


def modelled(impl, time_us, *, tuned=True, call=True, flow="lossless", **kw) -> dict:
    info = {"tuned": tuned, "synthesis_us": 90.0, "synthesis_warm_us": 40.0, "stages": 4}
    if call:
        info["call"] = {"allgather_us": 5.0, "synthesis_us": 34.0, "call_us": 39.0}
    r = rec(impl, time_us, system="h200", nodes=8, gpn=8, modelled=True,
            flow_control=flow, **kw)  # fmt: skip
    r["info"] = info if impl == "fast" else {}
    return r


def test_modelled_rows_name_tuning_call_costs_flow_control_and_baselines(tmp_path):
    records = [
        modelled("fanout", 250), modelled("deepep", 120),
        modelled("fast", 100),  # tuned, with call costs: 1.20x over DeepEP-like, in 1.01-1.3
        modelled("fast", 130, tuned=False),  # 0.92x: below the band
        modelled("fast", 80, call=False),  # 1.50x: above it
        modelled("fanout", 400, workload="zipf:0.99"), modelled("fast", 90, workload="zipf:0.99"),
    ]  # fmt: skip
    rows = measured_rows(card(tmp_path, records))
    speed = rows[rows["claim"].str.startswith("FAST vs best of NCCL fan-out / DeepEP, H200")]
    assert (speed["evidence"] == "modelled (h200, 8×8)").all() and (
        speed["paper"] == "1.01–1.3×"
    ).all()
    by = speed.set_index("configuration")
    base = "; vs best of fan-out, DeepEP-like (no NCCL records) (best: DeepEP-like at 1"
    tuned_on = f"FAST tuned by the model; per-call costs on; lossless{base}, fan-out at 1); "
    assert by.loc[tuned_on + "zipf:0.8, zipf:0.99 at 1 MiB", "verdict"] == (
        "partly (1 of 2 points in the band); at 95 %: 1 holds, 1 does not hold"
    )
    assert by.loc[tuned_on + "zipf:0.8, zipf:0.99 at 1 MiB", "ours"] == (
        "1.20–4.44× (2 points); modelled: exact; compare: 2 faster"
    )
    untuned = f"FAST untuned; per-call costs on; lossless{base}); zipf:0.8 at 1 MiB"
    assert by.loc[untuned, "verdict"] == "below the band; does not hold at 95 %"
    no_call = f"FAST tuned by the model; per-call costs off; lossless{base}); zipf:0.8 at 1 MiB"
    assert by.loc[no_call, "verdict"] == "above the band; does not hold at 95 %"


def test_position_names_both_sides_of_the_band():
    assert sc._position([0.5, 2.0, 3.0], 1.01, 1.3) == "outside the band (1 below, 2 above)"
    assert sc._position([0.5], 1.01, 1.3) == "below the band"
    assert sc._position([1.1, 2.0], 1.01, 1.3) == "partly (1 of 2 points in the band)"


def test_synthesis_rows_say_cold_or_warm(tmp_path):
    records = [modelled("fast", 100, workload=w) for w in ("zipf:0.8", "zipf:0.4")]
    records[1]["info"] = dict(records[1]["info"], synthesis_us=120.0, synthesis_warm_us=50.0)
    records.append({"collective": "schedule", "gpus": 64, "servers": 8, "strategy": "bvn",
                    "synthesis_us": 30.0, "stages": 9})  # fmt: skip
    rows = card(tmp_path, records)
    synth = rows[rows["claim"] == "FAST schedule synthesis, 64 GPUs"].set_index("configuration")
    traffic = "options tuned by the model; zipf:0.4, zipf:0.8 at 1 MiB"
    cold = f"cold: the one call the model's tuner timed; {traffic}"
    warm = ("warm: median of repeated schedule() calls on the same matrix, as the scheduler "
            f"benchmark times them; {traffic}")  # fmt: skip
    record = "cold: one schedule() call per record; the recorded options"
    assert list(synth.index) == [cold, warm, record]
    assert synth.loc[cold, "ours"] == "105 µs median of 2"
    assert synth.loc[warm, "ours"] == "45 µs median of 2"
    assert synth.loc[record, "ours"] == "30 µs median of 1"
    assert (
        synth.loc[cold, "evidence"] == "measured on this CPU (our scheduler, in commbench simulate)"
    )
    assert (synth["paper"] == "221 µs / 32 µs").all()


def test_every_validation_configuration_names_a_headline():
    headlines = [r["claim"] for r in sc.model_validation_rows()]
    assert headlines
    for start in sc.VALIDATION_CONFIGURATIONS:
        assert any(h.startswith(start) for h in headlines), start
    for row in sc.model_validation_rows():
        assert row["configuration"] != sc.VALIDATION_DEFAULT, row["claim"]
    h200 = next(r for r in sc.model_validation_rows() if "DeepEP-like, H200" in r["claim"])
    assert "4×8" in h200["configuration"] and "per-call costs on" in h200["configuration"]
    assert "vs best of fan-out, DeepEP-like" in h200["configuration"]


def test_no_interval_cannot_tell(tmp_path):
    one = [dict(rec("fast", 100), iter_time_us=None), dict(rec("fanout", 150), iter_time_us=None)]
    row = measured_rows(card(tmp_path, one)).iloc[0]
    assert row["verdict"].endswith("cannot tell at 95 % (no intervals)")
    assert math.isclose(float(row["ours"].split("×")[0]), 1.5)
