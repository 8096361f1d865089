"""``commbench simulate``: profiles to fabric, records marked modelled, the table, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from commbench.cli import main
from commbench.errors import UsageError
from commbench.jobs.profile import load_profile
from commbench.model.simulate import fabric_from_profile


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_fabric_comes_from_the_profile():
    prof = load_profile("h200").fabric
    f = fabric_from_profile("h200")
    assert f.gpus_per_node == load_profile("h200").devices.gpus_per_node
    assert f.nic_GBps == pytest.approx(prof.scaleout_GBps * prof.nics_per_node / 8)
    assert f.nic_us == prof.scaleout_latency_us
    assert f.scaleup_GBps == prof.scaleup_GBps
    assert f.scaleup_peer_GBps == prof.scaleup_peer_GBps
    assert f.stage_us == prof.stage_cost_us


def test_overrides_win_and_one_gpu_nodes_have_no_scaleup():
    f = fabric_from_profile("h200", stage_us=2.0, nic_us=0.5, incast=0.1, nic_GBps=None)
    assert (f.stage_us, f.nic_us, f.incast) == (2.0, 0.5, 0.1)
    assert fabric_from_profile("h200", gpus_per_node=4).gpus_per_node == 4
    vista = fabric_from_profile("vista")
    assert vista.gpus_per_node == 1 and math.isinf(vista.scaleup_GBps)


def test_bad_overrides_are_usage_errors():
    with pytest.raises(UsageError, match="nic_GBps"):
        fabric_from_profile("h200", nic_GBps=0.0)
    with pytest.raises(UsageError, match="unknown system"):
        fabric_from_profile("no-such-machine")


def test_alltoallv_records_and_table(tmp_path, capsys):
    out = tmp_path / "model.jsonl"
    rc = main(
        ["simulate", "alltoallv", "--system", "h200", "--servers", "2,3", "--size", "1M,4M",
         "--workload", "zipf:0.8", "--impls", "fast,fanout,spreadout,balance-only",
         "--stage-us", "2", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "MODELLED" in text and "stage 2 us" in text
    recs = records(out)
    assert len(recs) == 2 * 2 * 4
    for r in recs:
        assert r["backend"] == "model" and r["modelled"] is True and r["system"] == "h200"
        assert r["collective"] == "alltoallv" and r["gpus_per_node"] == 8
        assert r["nranks"] == r["nodes"] * 8 == len(r["rank_finish_us"])
        assert r["time_us_max"] == pytest.approx(max(r["rank_finish_us"]))
        assert r["time_us_min"] == pytest.approx(min(r["rank_finish_us"]))
        assert r["time_us"] == r["time_us_max"]  # -a 3 for all-to-allv
        assert r["algbw_GBps"] == pytest.approx(r["metric_bytes"] / r["time_us"] / 1e3)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * (r["nranks"] - 1) / r["nranks"])
        assert r["info"]["time_over_lb"] >= 1.0
        assert r["fabric"]["stage_us"] == 2.0
    fast = [r for r in recs if r["impl"] == "fast"]
    # S - 1 stages carry everything, unless the model's choice sends the rest in a tail
    assert all(r["info"]["stages"] >= r["nodes"] - 1 or r["info"]["tail"] for r in fast)
    assert all(r["info"]["stage_cost_bytes"] > 0 for r in fast)  # the model fed the scheduler
    assert {r["impl"] for r in recs} == {"fast", "fanout", "spreadout", "balance-only"}
    assert text.count("*") >= 4  # one fastest per (servers, size)


def test_allreduce_records(tmp_path, capsys):
    out = tmp_path / "ar.jsonl"
    rc = main(
        ["simulate", "allreduce", "--system", "perlmutter", "--nodes", "2,3", "-b", "64K",
         "-e", "256K", "--impls", "nvrar,ring,recursive-doubling,nccl", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    recs = records(out)
    assert len(recs) == 2 * 3 * 4
    for r in recs:
        assert (
            r["modelled"] is True
            and r["dtype"] == "bfloat16"
            and r["count"] == r["size_bytes"] // 2
        )
        assert r["busbw_factor"] == pytest.approx(2 * (r["nranks"] - 1) / r["nranks"])
        assert r["nranks"] == r["nodes"] * 4
    nccl = [r for r in recs if r["impl"] == "nccl"]
    assert all(r["info"]["algo"] in ("ring", "tree") for r in nccl)
    assert "nvrar" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["allreduce", "--system", "h200", "--nic-GBps", "0"], "nic_GBps"),
        (["allreduce", "--system", "h200", "--impls", "bogus"], "bogus"),
        (["allreduce", "--system", "h200", "--nodes", "0"], "--nodes"),
        (["allreduce", "--system", "h200", "--size", "3"], "multiple"),
        (["alltoallv", "--system", "h200", "--workload", "nope"], "workload"),
        (["alltoallv", "--system", "h200", "--size", "1M", "-b", "1K"], "either"),
        (["alltoallv", "--system", "h200", "--param", "colour=blue"], "colour"),
        (["allreduce", "--system", "h200", "--param", "strategy=bvn"], "alltoallv"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_one_gpu_per_node_system():
    from commbench.harness.workloads import generate
    from commbench.kernels.model import alltoallv as a2a

    f = fabric_from_profile("vista")
    d = generate("zipf:0.8", 4, 1 << 20, seed=1)
    assert a2a.fanout(d, f).rank_finish_us.shape == (4,)
    assert np.isfinite(a2a.spreadout(d, f).time_us)


def test_fast_is_tuned_by_default_and_balance_follows_the_plans(tmp_path):
    import commbench.kernels.fast
    from commbench.harness.workloads import generate
    from commbench.kernels.model import alltoallv as a2a

    out = tmp_path / "m.jsonl"
    base = ["simulate", "alltoallv", "--system", "h200", "--servers", "3", "--size", "4M",
            "--impls", "fast", "--stage-us", "2", "--no-call-costs", "--out", str(out)]  # fmt: skip
    assert main(base) == 0
    assert main([*base, "--no-tune"]) == 0
    assert main([*base, "--no-tune", "--balance", "prologue"]) == 0
    tuned, plain, pro = records(out)
    assert tuned["info"]["tuned"] is True and tuned["info"]["tuning"]["candidates"] > 1
    assert tuned["info"]["tuning"]["best_time_us"] == pytest.approx(tuned["time_us"])
    assert "raw_file" not in tuned and not (tmp_path / "m.raw.jsonl").exists()
    assert tuned["time_us"] <= plain["time_us"] == pytest.approx(tuned["info"]["default_time_us"])
    assert plain["info"]["tuned"] is False and plain["info"]["options"] == {
        "stage_cost_bytes": fabric_from_profile("h200", stage_us=2.0).stage_cost_bytes
    }
    # no --balance: the scheduler's default and the plans' steps, not a what-if
    assert "balance" not in plain["params"] and plain["info"]["balance"] == "plan"
    assert plain["info"]["balance_mode"] == "pipelined"
    assert pro["params"]["balance"] == "prologue" == pro["info"]["balance_mode"]
    f = fabric_from_profile("h200", stage_us=2.0)
    d = generate("zipf:0.8", 24, 4 << 20, seed=1)
    for rec, bal in ((plain, "pipelined"), (pro, "prologue")):
        sched = commbench.kernels.fast.schedule(
            d, 8, stage_cost_bytes=f.stage_cost_bytes, balance=bal
        )
        assert rec["time_us"] == pytest.approx(a2a.fast(d, sched.transfers(), f).time_us)


def test_balance_flag_and_param_must_agree(capsys):
    argv = ["simulate", "alltoallv", "--system", "h200", "--servers", "2", "--size", "1M",
            "--balance", "prologue", "--param", "balance=pipelined"]  # fmt: skip
    assert main(argv) == 2
    assert "disagree" in capsys.readouterr().err


def test_fast_pays_its_per_call_costs_and_the_relay_fanouts_run(tmp_path):
    from commbench.kernels.model import alltoallv as a2a

    out = tmp_path / "m.jsonl"
    base = ["simulate", "alltoallv", "--system", "mi300x", "--servers", "4", "--size", "1M",
            "--impls", "fast,pxn,deepep", "--no-tune", "--out", str(out)]  # fmt: skip
    assert main(base) == 0
    assert main([*base, "--no-call-costs"]) == 0
    recs = records(out)
    with_costs, without = recs[0], recs[3]
    call = with_costs["info"]["call"]
    f = fabric_from_profile("mi300x")
    assert call == a2a.call_overhead_us(32, f, a2a.synthesis_us(32))
    # 32 GPUs lies halfway between the law's 16 and 64 on log-log axes
    law = a2a.SYNTHESIS_US
    assert call["synthesis_us"] == pytest.approx(math.sqrt(law[16] * law[64]), rel=1e-9)
    assert with_costs["time_us"] == pytest.approx(without["time_us"] + call["call_us"])
    lb = without["info"]["lower_bound_us"]
    assert with_costs["info"]["schedule_time_over_lb"] == pytest.approx(without["time_us"] / lb)
    assert {r["impl"] for r in recs} == {"fast", "pxn", "deepep"}
    assert all(r["info"]["max_incast"] == 3 for r in recs if r["impl"] != "fast")


def test_flow_control_picks_the_profiles_incast_case(capsys):
    lossless = fabric_from_profile("mi300x", flow_control="lossless")
    lossy = fabric_from_profile("mi300x", flow_control="lossy")
    assert (lossless.incast, lossy.incast, lossy.switch_buffer_MB) == (0.02, 0.5, 1.0)
    assert fabric_from_profile("mi300x").incast == lossless.incast  # the profile's default
    assert fabric_from_profile("mi300x", flow_control="lossy", incast=0.3).incast == 0.3
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "alltoallv", "--system", "mi300x", "--servers", "2",
              "--flow-control", "wet"])  # fmt: skip
    assert exc.value.code == 2 and "--flow-control" in capsys.readouterr().err


def test_tuning_reports_progress_on_a_terminal(capsys):
    from commbench.model import simulate

    seen = []
    f = fabric_from_profile("h200")
    pts = simulate.alltoallv_points(f, [2], [1 << 20], ["zipf:0.8"], ["fast"], 1, progress=True)
    (point,) = list(pts)
    err = capsys.readouterr().err
    assert "tuning FAST: 2 nodes, zipf:0.8, 1M:" in err and "best" in err
    assert err.endswith("\r\033[K")  # the progress line is cleared before the table row
    from commbench.harness.workloads import generate
    from commbench.kernels.model.tune import tune_fast

    d = generate("zipf:0.8", 16, 1 << 20, seed=1)
    t = tune_fast(d, 8, f, progress=lambda n, best: seen.append((n, best)))
    assert [n for n, _ in seen] == list(range(1, len(t.candidates) + 1))
    assert seen[-1][1] == pytest.approx(t.prediction.time_over_lb)
    assert point.extra["tuned"] is True


def test_keep_tuning_puts_the_candidates_in_the_raw_side_file(tmp_path):
    out = tmp_path / "k.jsonl"
    argv = ["simulate", "alltoallv", "--system", "h200", "--servers", "2", "--size", "1M",
            "--impls", "fast,fanout", "--keep-tuning", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    fast, fanout = records(out)
    raw = [json.loads(line) for line in (tmp_path / "k.raw.jsonl").read_text().splitlines()]
    assert fast["raw_file"] == "k.raw.jsonl" and "raw_file" not in fanout
    assert len(raw) == 1 and raw[0]["point"] == fast["point"] and raw[0]["impl"] == "fast"
    rows = raw[0]["tuning_candidates"]
    assert len(rows) == fast["info"]["tuning"]["candidates"] > 1
    assert min(r["time_us"] for r in rows) == pytest.approx(fast["info"]["tuning"]["best_time_us"])
    assert "candidates" not in fast["info"] and len(json.dumps(fast)) < 8000


def test_keep_tuning_needs_out(capsys):
    argv = ["simulate", "alltoallv", "--system", "h200", "--servers", "2", "--size", "1M",
            "--impls", "fast", "--keep-tuning"]  # fmt: skip
    assert main(argv) == 2
    assert "--keep-tuning writes next to --out" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_table_quietly():
    """``commbench simulate ... | head -1``: the closed pipe stops the command with
    SIGPIPE's status and no error line, as a Unix tool stops."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "commbench", "simulate", "allreduce", "--system", "perlmutter",
         "--nodes", "2,4,8,16,32,64,128,256", "-b", "1K", "-e", "1G"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout.readline().startswith(b"# commbench")
    proc.stdout.close()  # the reader goes away with the rest of the table unread
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGPIPE
    assert err == b""
