"""The emulated cluster's pure parts (no root needed): rates, counts, names, addresses,
``tc`` arguments, the launch line, profiles, and the command line's refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from commbench.cli import main
from commbench.cluster import netns
from commbench.cluster.netns import ClusterError, parse_proc_net
from commbench.cluster.plan import (
    TCP_BTL_FLAGS,
    ClusterSpec,
    burst_bytes,
    fabric_metadata,
    loss_script,
    mpirun_command,
    node_qdisc_commands,
    parse_rate,
    port_qdisc_command,
    rank_wrapper_script,
)
from commbench.cluster.profiles import load_emulated_profile, profile_names
from commbench.errors import UsageError
from commbench.kernels.model import Fabric


def test_rates_parse_with_units():
    assert parse_rate("400mbit") == 400.0
    assert parse_rate("1gbit") == 1000.0
    assert parse_rate("500kbit") == 0.5
    assert parse_rate("250") == 250.0


@pytest.mark.parametrize("bad", ["0", "abc", "-5mbit", "1tbit", "0mbit", "200gbit", ""])
def test_bad_rates_say_how_to_write_one(bad):
    with pytest.raises(UsageError, match="NIC rate"):
        parse_rate(bad)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(nodes=1), "at least 2"),
        (dict(nodes=0), "--nodes"),
        (dict(ranks_per_node=9), "--ranks-per-node"),
        (dict(nodes=16, ranks_per_node=4), "do not fit"),
        (dict(prefix="CB"), "prefix"),
        (dict(prefix="toolongx"), "prefix"),
        (dict(switch_queue=1), "--switch-queue"),
        (dict(latency_us=-1.0), "--latency"),
        (dict(tcp_congestion="cubic; reboot"), "--tcp-congestion"),
        (dict(tcp_congestion=""), "--tcp-congestion"),
    ],
)
def test_bad_specs_are_refused(kwargs, message):
    base = dict(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0)
    with pytest.raises(UsageError, match=message):
        ClusterSpec(**{**base, **kwargs})


@given(
    prefix=st.from_regex(r"[a-z][a-z0-9]{1,5}", fullmatch=True),
    nodes=st.integers(2, 16),
    rpn=st.integers(1, 8),
)
def test_names_fit_the_kernel_and_addresses_are_unique(prefix, nodes, rpn):
    assume(nodes * rpn <= 32)
    spec = ClusterSpec(prefix=prefix, nodes=nodes, ranks_per_node=rpn, nic_mbit=100.0)
    nics = [c for n in spec.all_nodes() for c in n.nics]
    ifaces = [c.port for c in nics] + [n.mgmt_port for n in spec.all_nodes()]
    ifaces += [c.name for c in nics] + [spec.bridge, spec.mgmt_bridge, spec.mgmt_iface]
    assert all(len(i) <= 15 and i.startswith(prefix) for i in ifaces)
    assert len(set(ifaces[: len(nics) + nodes])) == len(nics) + nodes  # switch side unique
    addresses = [c.address for c in nics] + [n.mgmt_address for n in spec.all_nodes()]
    assert len(set(addresses)) == len(addresses)
    assert all(ns.startswith(prefix + "-") for ns in spec.namespaces())


def test_shaping_send_side_and_switch_port_with_the_queue_depth():
    spec = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0, switch_queue=16)
    nic = spec.node(1).nics[0]
    (send,) = node_qdisc_commands(spec, nic)
    assert send[:5] == ["tc", "qdisc", "add", "dev", "cbnic0"] and "400mbit" in send
    port = port_qdisc_command(spec, nic)
    assert port[4] == "cbn1p0" and port[port.index("limit") + 1] == str(burst_bytes(400.0))
    deep = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0)
    assert port_qdisc_command(deep, nic)[-1] == str(1000 * 1514)
    lat = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0, latency_us=100)
    netem, tbf = node_qdisc_commands(lat, nic)
    assert "delay" in netem and "100us" in netem and "parent" in tbf


def test_stage_cost_bytes_is_the_cost_models():
    """FAST on the cluster is told the stage cost the model would give it: the stage's
    fixed cost plus the link's latency, in TCP payload bytes of one NIC."""
    spec = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=100.0,
                       stage_cost_us=12000.0, latency_us=100.0)  # fmt: skip
    model = Fabric(gpus_per_node=2, nic_GBps=spec.payload_GBps, nic_us=100.0,
                   scaleup_GBps=10.0, scaleup_us=1.0, stage_us=12000.0)  # fmt: skip
    assert spec.stage_cost_bytes == model.stage_cost_bytes == round(12100 * spec.payload_GBps * 1e3)
    assert ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=100.0).stage_cost_bytes == 0


@given(st.floats(min_value=0.0001, max_value=99.99))
def test_loss_drops_that_share_of_what_reaches_the_switch_port(pct):
    nic = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0).node(1).nics[0]
    script = loss_script(nic, pct)
    assert 'hook ingress device "cbn1p0"' in script
    rule = script.splitlines()[-1]
    assert rule.startswith("add rule netdev commbench loss_cbn1p0 numgen random mod 1000000 <")
    assert abs(int(rule.split("<")[1].split()[0]) / 1e6 - pct / 100) <= 0.5e-6
    assert "flush chain" in script  # setting it again replaces the rule


def test_loss_zero_removes_the_rule_and_bad_shares_are_refused():
    nic = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0).node(0).nics[1]
    assert loss_script(nic, 0).splitlines()[-1] == "delete chain netdev commbench loss_cbn0p1"
    for bad in (-1.0, 100.0, float("nan")):
        with pytest.raises(UsageError, match="--loss takes a percentage"):
            loss_script(nic, bad)


def test_launch_line_uses_the_management_network_and_fills_nodes_in_order():
    spec = ClusterSpec(prefix="cb", nodes=3, ranks_per_node=2, nic_mbit=400.0)
    line = mpirun_command(spec, "mpirun", "/s/rank-wrapper", ["python", "x.py"])
    assert line[line.index("--host") + 1] == "10.78.0.1:2,10.78.0.2:2,10.78.0.3:2"
    assert line[line.index("-n") + 1] == "6"
    assert "tcp,self,sm" in line and "cbmgmt" in line
    assert line[-3:] == ["/s/rank-wrapper", "python", "x.py"]
    with pytest.raises(UsageError, match="does not fit"):
        mpirun_command(spec, "mpirun", "w", ["x"], np=7)


def test_first_node_puts_rank_0_there_and_the_other_nodes_follow_wrapping_round():
    spec = ClusterSpec(prefix="cb", nodes=3, ranks_per_node=2, nic_mbit=400.0)
    line = mpirun_command(spec, "mpirun", "w", ["x"], first_node=2)
    assert line[line.index("--host") + 1] == "10.78.0.3:2,10.78.0.1:2,10.78.0.2:2"
    for bad in (-1, 3):
        with pytest.raises(UsageError, match="--first-node .*nodes 0-2"):
            mpirun_command(spec, "mpirun", "w", ["x"], first_node=bad)


def test_proc_net_counters_pair_each_header_line_with_its_values():
    text = (
        "Tcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 17 0\n"
        "TcpExt: TCPTimeouts TCPLossProbes\nTcpExt: 2 5\n"
    )
    assert parse_proc_net(text) == {
        "Tcp.RtoAlgorithm": 1, "Tcp.RetransSegs": 17, "Tcp.InErrs": 0,
        "TcpExt.TCPTimeouts": 2, "TcpExt.TCPLossProbes": 5,
    }  # fmt: skip
    with pytest.raises(ClusterError, match="unexpected /proc/net line for Tcp"):
        parse_proc_net("Tcp: A B\nTcp: 1\n")


def test_the_rank_wrapper_picks_the_nic_and_drops_the_tcp_put_unless_told(tmp_path):
    spec = ClusterSpec(prefix="cb", nodes=2, ranks_per_node=2, nic_mbit=400.0)
    wrapper = tmp_path / "rank-wrapper"
    wrapper.write_text(rank_wrapper_script(spec, "/s/cluster.json"))
    base = {"PATH": os.environ["PATH"], "OMPI_COMM_WORLD_LOCAL_RANK": "1"}

    def rank_env(**extra: str) -> dict[str, str]:
        out = subprocess.run(["sh", str(wrapper), "env"], env={**base, **extra},
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        return dict(line.split("=", 1) for line in out.splitlines())

    env = rank_env()
    assert env["OMPI_MCA_btl_tcp_if_include"] == "cbnic1"
    assert env["OMPI_MCA_btl_tcp_flags"] == TCP_BTL_FLAGS
    assert rank_env(OMPI_MCA_btl_tcp_flags="send")["OMPI_MCA_btl_tcp_flags"] == "send"


def test_the_clusters_tcp_flags_are_open_mpis_defaults_less_put():
    ompi_info = Path(sys.executable).with_name("ompi_info")
    if not ompi_info.exists():
        pytest.skip("no ompi_info next to this Python (the MPI wheel's)")
    out = subprocess.run([str(ompi_info), "--param", "btl", "tcp", "--level", "9", "--parsable"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    line = next(x for x in out.splitlines() if ":btl_tcp_flags:value:" in x)
    default = line.rsplit(":", 1)[1].strip('"').split(",")
    assert "put" in default
    assert TCP_BTL_FLAGS.split(",") == [f for f in default if f != "put"]


def test_every_emulated_profile_loads_and_scales_from_shared_memory():
    names = profile_names()
    assert {"h200", "perlmutter", "mi300x", "vista"} <= set(names)
    for name in names:
        prof = load_emulated_profile(name)
        spec = prof.cluster_spec("cb", prof.nodes, prof.ranks_per_node, prof.nic_mbit(2.0))
        assert spec.nic_GBps <= 2.0 / prof.tier_ratio + 1e-9
        assert (spec.switch_queue, spec.profile, spec.tcp_congestion) == (
            prof.switch_queue, name, prof.tcp_congestion)  # fmt: skip
        assert prof.cluster_spec("cb", 2, 1, 1.0, tcp_congestion="reno").tcp_congestion == "reno"
    assert load_emulated_profile("mi300x").switch_queue < 100  # the lossy one
    assert load_emulated_profile("vista").ranks_per_node == 1
    # the ranks' congestion control is a fabric fact, never the host's own default
    assert {load_emulated_profile(n).tcp_congestion for n in names} == {"cubic"}
    assert fabric_metadata(ClusterSpec(prefix="cb", nodes=2, ranks_per_node=1, nic_mbit=1.0,
                                       tcp_congestion="reno"))["tcp_congestion"] == "reno"  # fmt: skip
    with pytest.raises(UsageError, match="unknown emulated profile"):
        load_emulated_profile("nope")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('nodes = "two"', r"x\.toml: nodes must be an integer, not 'two'"),
        ("tier_ratio = 1", r"x\.toml: tier_ratio must be greater than 1"),
        ("latency_us = -1.5", r"x\.toml: latency_us must be greater than or equal to 0"),
        ("colour = 1", r"x\.toml: unknown key\(s\) colour"),
        ('name = "y"', r"x\.toml: unknown key\(s\) name \(the file name"),
    ],
)
def test_a_bad_emulated_profile_names_file_and_key(tmp_path, body, message):
    good = 'description = "d"\nnodes = 2\nranks_per_node = 2\ntier_ratio = 9\n'
    key = body.split(" = ")[0]
    kept = [line for line in good.splitlines() if not line.startswith(key + " ")]
    (tmp_path / "x.toml").write_text("\n".join([*kept, body]) + "\n")
    with pytest.raises(UsageError, match=message):
        load_emulated_profile("x", tmp_path)
    (tmp_path / "ok.toml").write_text(good)
    assert load_emulated_profile("ok", tmp_path).tier_ratio == 9.0


def _cli(capsys, *args: str) -> tuple[int, str]:
    """``commbench cluster ARGS`` in this process: exit status and stderr."""
    rc = main(["cluster", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nic", "0"], "NIC rate"),
        (["--nic", "abc"], "NIC rate"),
        (["--nic", "1gbit", "--nodes", "0"], "--nodes"),
        (["--nic", "1gbit", "--nodes", "16", "--ranks-per-node", "8"], "do not fit"),
        ([], "--nic"),
        (["--profile", "nope"], "unknown emulated profile"),
        (["--nic", "1gbit", "--tcp-congestion", "Cubic"], "--tcp-congestion"),
    ],
)
def test_bad_up_is_one_line_exit_2_and_builds_nothing(capsys, tmp_path, args, message):
    rc, err = _cli(capsys, "up", "--prefix", "cbx", "--state", str(tmp_path / "s"), *args)
    assert rc == 2 and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_down_status_exec_with_nothing_up_are_refused(capsys, tmp_path):
    state = str(tmp_path / "s")
    for verb in (["down"], ["status"], ["fault", "--link", "0/0", "down"]):
        rc, err = _cli(capsys, *verb, "--prefix", "cbx", "--state", state)
        assert rc == 2, verb
        assert "nothing to take down" in err or "no emulated cluster" in err
    rc, err = _cli(capsys, "exec", "--prefix", "cbx", "--state", state, "--", "true")
    assert rc == 2 and "no emulated cluster" in err


def test_up_without_net_admin_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(netns, "has_net_admin", lambda: False)
    spec = ClusterSpec(prefix="cbx", nodes=2, ranks_per_node=1, nic_mbit=10.0)
    with pytest.raises(UsageError, match="CAP_NET_ADMIN"):
        netns.up(spec, tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_bench_tables_show_only_the_ratios_whose_rows_were_measured():
    import pandas as pd

    from commbench.benchmarks.cluster import tables

    def row(impl, us, workload="uniform"):
        return dict(shape="2x4", queue="target-deep", workload=workload, impl=impl,
                    samples_us=[us, us], nic_bytes_per_call=1.1e6, lower_bound_bytes=1e6,
                    model_us=None, switch_drops=0, nwrong=0)  # fmt: skip

    uniform = tables(pd.DataFrame([row("fast", 400.0), row("fanout", 300.0)]))
    assert "| 2x4 | FAST vs fan-out, uniform | >= 0.9 | 0.75 |" in uniform
    assert "zipf" not in uniform.split("## Modelled")[0]
    both = tables(pd.DataFrame([row("fast", 400.0), row("fanout", 300.0),
                                row("fast", 200.0, "zipf:0.8"), row("fanout", 300.0, "zipf:0.8")]))  # fmt: skip
    assert "| 2x4 | FAST vs fan-out, zipf 0.8, deep | >= 1.3 | 1.50 |" in both
    assert (
        "busiest NIC / lower bound, FAST (raw; per wire overhead 1.100) | <= 1.05 | 1.100; 1.000"
        in both
    )
