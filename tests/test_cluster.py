"""The emulated cluster, for real: a 2-node x 2-rank cluster (prefix ``cbt``, its own
state dir) brought up once per test run and torn down even when a test fails.

Needs root (CAP_NET_ADMIN), iproute2 and (for loss) nftables: skipped with the reason
elsewhere, a failure under ``CI=true`` (CI runs as root and must run these).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from commbench.cluster import netns
from commbench.cluster.plan import ClusterSpec
from tests.mpirun import ROOT

PREFIX = "cbt"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _require_privileges() -> None:
    try:
        netns.preflight()
    except ValueError as exc:
        _missing(str(exc))


def _missing(why: str) -> None:
    if IN_CI:
        pytest.fail(f"CI must run the emulated-cluster tests: {why}")
    pytest.skip(why)


def commbench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    _require_privileges()
    folder = tmp_path_factory.mktemp("cluster-state")
    if netns.namespaces_with_prefix(PREFIX):  # a crashed earlier test run
        netns.remove(PREFIX, folder)
    spec = ClusterSpec(prefix=PREFIX, nodes=2, ranks_per_node=2, nic_mbit=800.0)
    netns.up(spec, folder)
    try:
        yield spec, folder
    finally:
        netns.remove(PREFIX, folder)
    assert not netns.namespaces_with_prefix(PREFIX)


def on_cluster(folder: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return commbench("cluster", "exec", "--prefix", PREFIX, "--state", str(folder),
                     "--timeout", str(timeout - 10), "--", *argv, timeout=timeout)  # fmt: skip


def test_every_cpu_implementation_matches_mpi_byte_for_byte_over_tcp(cluster, tmp_path):
    spec, folder = cluster
    out = tmp_path / "parity.json"
    proc = on_cluster(folder, sys.executable, "tests/scripts/cluster_parity.py", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["topology"] == {
        "nodes": 2,
        "gpus_per_node": 2,
        "hosts": ["cbt-n0", "cbt-n0", "cbt-n1", "cbt-n1"],
    }
    from commbench.kernels.registry import implementations

    for coll in ("alltoallv", "allreduce", "allgather", "reducescatter", "broadcast"):
        names = {s.name for s in implementations(coll) if "cpu" in s.backends}
        assert result[coll] == dict.fromkeys(names, 0), coll


def test_a_ranks_bytes_use_its_own_nic_and_the_peers(cluster):
    spec, folder = cluster
    nbytes, iters = 4 << 20, 3
    before = netns.counters(spec)
    # rank 0 = node 0 local 0; rank 3 = node 1 local 1
    proc = on_cluster(folder, sys.executable, "-m", "commbench.cluster.pingpong",
                      str(nbytes), str(iters), "3")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = netns.counters(spec)
    moved = (iters + 3) * nbytes  # warm-up included, each way
    delta = {k: (after[k]["tx_bytes"] - before[k]["tx_bytes"],
                 after[k]["rx_bytes"] - before[k]["rx_bytes"]) for k in after}  # fmt: skip
    assert delta[(0, 0)][0] >= moved and delta[(0, 0)][1] >= moved
    assert delta[(1, 1)][0] >= moved and delta[(1, 1)][1] >= moved
    for quiet in ((0, 1), (1, 0)):
        assert max(delta[quiet]) < moved / 100, (quiet, delta)


def test_records_say_they_come_from_the_emulated_cluster(cluster, tmp_path):
    spec, folder = cluster
    out = tmp_path / "r.jsonl"
    proc = on_cluster(folder, "commbench", "run", "alltoallv", "--impl", "fanout", "-b", "64K",
                      "-e", "64K", "-n", "2", "-w", "1", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = pd.read_json(out, lines=True).iloc[0]
    assert rec.nodes == 2 and rec.gpus_per_node == 2 and rec.nwrong == 0
    assert rec.hostnames == ["cbt-n0", "cbt-n1"]
    assert rec.system == "emulated-cluster-custom"
    fabric = rec.emulated_fabric
    assert fabric["emulated"] and fabric["nic_mbit"] == 800.0 and fabric["switch_queue_pkts"]


def test_one_percent_loss_on_a_nic_still_gives_exact_results(cluster, tmp_path):
    spec, folder = cluster
    nic = spec.node(1).nics[0]  # rank 2's
    if shutil.which("nft") is None:
        _missing(str(netns.not_installed("nft")))
    link = ["cluster", "fault", "--prefix", PREFIX, "--state", str(folder), "--link", "1/0"]
    proc = commbench(*link, "loss", "--loss", "1")
    assert proc.returncode == 0, proc.stderr
    try:
        sent_before = netns.counters(spec)[(1, 0)]["tx_packets"]
        out = tmp_path / "parity.json"
        proc = on_cluster(folder, sys.executable, "tests/scripts/cluster_parity.py", str(out),
                          "fanout", "fast", "ring", "nvrar")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(out.read_text())
        assert result["alltoallv"] == {"fanout": 0, "fast": 0}
        assert result["allreduce"] == {"ring": 0, "nvrar": 0}
        # enough packets through the lossy NIC that "some were lost" cannot fail by chance
        proc = on_cluster(folder, sys.executable, "-m", "commbench.cluster.pingpong",
                          str(64 << 10), "400", "2")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        sent = netns.counters(spec)[(1, 0)]["tx_packets"] - sent_before
        lost = netns.loss_drops(spec, nic)
        assert sent > 2000 and 0.002 < lost / sent < 0.05, (lost, sent)
    finally:
        assert commbench(*link, "loss", "--loss", "0").returncode == 0
    assert netns.loss_drops(spec, nic) is None


def test_a_nic_taken_down_mid_run_ends_the_job_with_the_rank_named(cluster, tmp_path):
    spec, folder = cluster
    out = tmp_path / "r.jsonl"
    argv = [sys.executable, "-m", "commbench", "cluster", "exec", "--prefix", PREFIX, "--state",
            str(folder), "--timeout", "90", "--", "commbench", "run", "alltoallv", "--impl",
            "fanout", "-b", "64K", "-e", "64M", "-f", "2", "-n", "20", "-w", "1",
            "--watchdog", "4", "--out", str(out)]  # fmt: skip
    link = ["cluster", "fault", "--prefix", PREFIX, "--state", str(folder), "--link", "1/1"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text().count("\n") >= 2):
            assert time.monotonic() < deadline and proc.poll() is None, "no records came"
            time.sleep(0.2)
        assert commbench(*link, "down").returncode == 0
        cut = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        ended_after = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        commbench(*link, "up")
    assert proc.returncode != 0
    assert ended_after < 30, ended_after
    assert "watchdog" in stderr and "rank" in stderr, stderr[-2000:]
    records = pd.read_json(out, lines=True)  # every record written is whole
    assert len(records) >= 2 and (records.nwrong == 0).all()


def test_second_up_and_bad_input_are_refused_in_one_line(cluster):
    spec, folder = cluster
    proc = commbench("cluster", "up", "--prefix", PREFIX, "--state", str(folder), "--nic", "1gbit")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "already up" in proc.stderr
    proc = commbench("cluster", "fault", "--prefix", PREFIX, "--state", str(folder),
                     "--link", "5/0", "down")  # fmt: skip
    assert proc.returncode == 2 and "nodes 0-1" in proc.stderr
    assert sorted(netns.namespaces_with_prefix(PREFIX)) == ["cbt-n0", "cbt-n1", "cbt-sw"]


def test_rank_0_and_mpirun_can_sit_on_another_node(cluster):
    spec, folder = cluster
    where = "import os, socket; print(os.environ['OMPI_COMM_WORLD_RANK'], socket.gethostname())"
    proc = commbench("cluster", "exec", "--prefix", PREFIX, "--state", str(folder),
                     "--launch-node", "1", "--first-node", "1", "--timeout", "60", "--",
                     sys.executable, "-c", where, timeout=90)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    hosts = dict(line.split() for line in proc.stdout.splitlines() if line[:1].isdigit())
    assert hosts == {"0": "cbt-n1", "1": "cbt-n1", "2": "cbt-n0", "3": "cbt-n0"}
    for bad, why in ((["--launch-node", "2"], "nodes 0-1"), (["--first-node", "5"], "nodes 0-1"),
                     (["--node", "0", "--first-node", "1"], "drop --launch-node")):  # fmt: skip
        proc = commbench("cluster", "exec", "--prefix", PREFIX, "--state", str(folder), *bad,
                         "--", "true")  # fmt: skip
        assert proc.returncode == 2 and why in proc.stderr, (bad, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_status_counts_each_nodes_tcp_retransmissions(cluster):
    spec, folder = cluster
    tcp = netns.tcp_counters(spec)
    assert sorted(tcp) == [0, 1]
    assert all(set(c) == {"retrans", "timeouts", "probes", "fast"} for c in tcp.values())
    assert all(isinstance(v, int) and v >= 0 for c in tcp.values() for v in c.values())
    proc = commbench("cluster", "status", "--prefix", PREFIX, "--state", str(folder))
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("tcp retrans") :].splitlines()
    assert [row.split()[0] for row in table[1:]] == ["cbt-n0", "cbt-n1"]


def test_down_leaves_no_namespace_veth_or_qdisc(tmp_path):
    _require_privileges()
    prefix = "cbu"
    folder = tmp_path / "state"
    spec = ClusterSpec(prefix=prefix, nodes=2, ranks_per_node=1, nic_mbit=100.0)
    try:
        netns.up(spec, folder)
        assert sorted(netns.namespaces_with_prefix(prefix)) == ["cbu-n0", "cbu-n1", "cbu-sw"]
        desc = json.loads((folder / "cluster.json").read_text())
        assert [n["hostname"] for n in desc["nodes"]] == ["cbu-n0", "cbu-n1"]
        assert "tbf" in netns.sh(["tc", "-n", "cbu-sw", "qdisc", "show", "dev", "cbun1p0"])
    finally:
        proc = commbench("cluster", "down", "--prefix", prefix, "--state", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert netns.namespaces_with_prefix(prefix) == []
    assert not folder.exists()
    root_links = netns.sh(["ip", "-o", "link", "show"]) + netns.sh(["tc", "qdisc", "show"])
    assert prefix not in root_links
    proc = commbench("cluster", "down", "--prefix", prefix, "--state", str(folder))
    assert proc.returncode == 2 and "nothing to take down" in proc.stderr


def test_latency_is_netem_or_a_clear_refusal(tmp_path):
    _require_privileges()
    folder = tmp_path / "state"
    proc = commbench("cluster", "up", "--prefix", "cbw", "--state", str(folder), "--nodes", "2",
                     "--ranks-per-node", "1", "--nic", "100mbit", "--latency", "100")  # fmt: skip
    try:
        if proc.returncode == 0:
            assert "delay 100us" in netns.sh(["tc", "-n", "cbw-n0", "qdisc", "show"])
        else:
            assert proc.returncode == 2 and "no netem qdisc" in proc.stderr, proc.stderr
            assert netns.namespaces_with_prefix("cbw") == [] and not folder.exists()
    finally:
        if netns.namespaces_with_prefix("cbw"):
            netns.remove("cbw", folder)


def test_a_failed_up_leaves_nothing_behind(tmp_path, monkeypatch):
    _require_privileges()
    prefix = "cbv"
    spec = ClusterSpec(prefix=prefix, nodes=2, ranks_per_node=2, nic_mbit=100.0)
    calls = []

    def failing_nic(spec, ns, nic):
        calls.append(nic)
        if len(calls) == 3:
            raise netns.ClusterError("injected failure")
        real_nic(spec, ns, nic)

    real_nic = netns._nic
    monkeypatch.setattr(netns, "_nic", failing_nic)
    with pytest.raises(netns.ClusterError, match="injected"):
        netns.up(spec, tmp_path / "state")
    assert netns.namespaces_with_prefix(prefix) == []
    assert not (tmp_path / "state").exists()


_CONGESTION_PROBE = """
import socket, sys
role, me, peer = sys.argv[1:4]
if role == "server":
    s = socket.socket()  # the port again, whichever end's close left it in TIME_WAIT
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((me, 5099)); s.listen(); s.settimeout(20)
    print("ready", flush=True)
    conn, _ = s.accept()
else:
    conn = socket.socket()
    if me != "-":
        conn.bind((me, 0))
    conn.settimeout(20); conn.connect((peer, 5099))
print(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode())
"""


def _congestion_of_a_connection(prefix: str, bind: bool) -> tuple[str, str]:
    """The congestion control of both ends of a TCP connection from node 0's NIC to node
    1's (the client bound to its NIC's address as Open MPI binds, or not bound)."""
    a, b = "10.77.0.1", "10.77.1.1"
    server = subprocess.Popen(["ip", "netns", "exec", f"{prefix}-n1", sys.executable, "-c",
                               _CONGESTION_PROBE, "server", b, a],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout.readline().strip() == "ready"
        client = subprocess.run(["ip", "netns", "exec", f"{prefix}-n0", sys.executable, "-c",
                                 _CONGESTION_PROBE, "client", a if bind else "-", b],
                                capture_output=True, text=True, timeout=30)  # fmt: skip
        assert client.returncode == 0, client.stderr
        return client.stdout.strip(), server.communicate(timeout=30)[0].strip()
    finally:
        server.kill()


def test_the_ranks_tcp_congestion_control_is_the_profiles_not_the_hosts(tmp_path):
    """Reno (built into every kernel, the default of none) on both ends of a rank
    connection, bound or not, whatever the host's default; a congestion control the
    kernel lacks is refused in one line with nothing left behind."""
    _require_privileges()
    prefix = "cbc"
    folder = tmp_path / "state"
    spec = ClusterSpec(prefix=prefix, nodes=2, ranks_per_node=1, nic_mbit=100.0,
                       tcp_congestion="reno")  # fmt: skip
    try:
        netns.up(spec, folder)
        assert _congestion_of_a_connection(prefix, bind=True) == ("reno", "reno")
        assert _congestion_of_a_connection(prefix, bind=False) == ("reno", "reno")
        assert "TCP reno" in netns.status_text(folder)
    finally:
        netns.remove(prefix, folder)
    missing = ClusterSpec(prefix=prefix, nodes=2, ranks_per_node=1, nic_mbit=100.0,
                          tcp_congestion="nosuchcc")  # fmt: skip
    with pytest.raises(netns.ClusterError, match="no TCP congestion control 'nosuchcc'"):
        netns.up(missing, folder)
    assert netns.namespaces_with_prefix(prefix) == [] and not folder.exists()
