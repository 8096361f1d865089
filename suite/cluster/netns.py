"""Building, inspecting and removing the emulated cluster with ``ip`` and ``tc``.

Everything the cluster creates lives in namespaces named ``PREFIX-*``: nothing is added
to the machine's own namespace, so no address of the cluster is reachable from it. The
state dir holds ``cluster.json`` (the description other tools read), the launcher's
agent and the rank wrapper; ``down`` removes every ``PREFIX-*`` namespace whether or not
the state survived a crash.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from commbench.cluster.plan import (
    LOSS_FAMILY,
    LOSS_TABLE,
    ClusterSpec,
    Nic,
    agent_script,
    describe,
    loss_chain,
    loss_script,
    node_qdisc_commands,
    port_qdisc_command,
    rank_wrapper_script,
    spec_from_dict,
)
from commbench.errors import UsageError
from commbench.launch import terminate

STATE_ENV = "COMMBENCH_CLUSTER_STATE"
STATE_ROOT = Path("/run/commbench-cluster")
#: the cluster's name when none is given (``--prefix``, ``$COMMBENCH_CLUSTER_PREFIX``)
DEFAULT_PREFIX = "cb"
STATE_FILE = "cluster.json"
AGENT = "agent"
WRAPPER = "rank-wrapper"
TOOLS = ("ip", "tc", "nsenter", "unshare")
#: the Debian package of each command the cluster runs (`nft` only for loss faults)
PACKAGES = {"ip": "iproute2", "tc": "iproute2", "nsenter": "util-linux",
            "unshare": "util-linux", "sysctl": "procps", "nft": "nftables"}  # fmt: skip
_CAP_NET_ADMIN = 12
#: per node namespace: answer ARP only for the NIC that holds the address, and accept
#: packets on any NIC of the subnet (several NICs share one subnet)
NODE_SYSCTLS = (
    "net.ipv4.conf.all.arp_ignore=1",
    "net.ipv4.conf.default.arp_ignore=1",
    "net.ipv4.conf.all.arp_announce=2",
    "net.ipv4.conf.default.arp_announce=2",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
)


class ClusterError(UsageError):
    """A cluster command could not do its work; the message says why."""


def state_dir(prefix: str, given: str | os.PathLike | None = None) -> Path:
    """``--state``, else ``$COMMBENCH_CLUSTER_STATE``, else ``/run/commbench-cluster/PREFIX``."""
    return Path(given or os.environ.get(STATE_ENV) or STATE_ROOT / prefix)


def load_state(folder: Path) -> dict:
    path = folder / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"no emulated cluster is up (no {path}): start one with `commbench cluster up`"
        ) from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is damaged ({exc}): run `commbench cluster down`") from None


def current_fabric() -> dict | None:
    """The emulated fabric this rank runs on (``$COMMBENCH_CLUSTER``, set by the rank
    wrapper), for result records; None outside the emulated cluster."""
    path = os.environ.get("COMMBENCH_CLUSTER")
    return load_state(Path(path).parent)["fabric"] if path else None


def load_spec(folder: Path) -> ClusterSpec:
    return spec_from_dict(load_state(folder)["spec"])


# ------------------------------------------------------------------ commands


def sh(argv: list[str], timeout: float = 30, stdin: str | None = None) -> str:
    """Run one command; its stderr becomes the error message if it fails."""
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise not_installed(argv[0]) from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{' '.join(argv)}` did not finish in {timeout:g} s") from None
    if done.returncode:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise ClusterError(f"`{' '.join(argv)}` failed: {why[-1] if why else done.returncode}")
    return done.stdout


def not_installed(tool: str) -> ClusterError:
    return ClusterError(
        f"{tool} is not installed (Debian: apt-get install {PACKAGES.get(tool, tool)})"
    )


def nft_in_switch(spec: ClusterSpec, argv: list[str], stdin: str | None = None) -> str:
    """``nft ARGV`` inside the switch namespace (``ip netns exec`` cannot say nft is missing)."""
    if shutil.which("nft") is None:
        raise not_installed("nft")
    return sh(in_ns(spec.switch_netns, ["nft", *argv]), stdin=stdin)


def in_ns(netns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def namespaces_with_prefix(prefix: str) -> list[str]:
    """Names in ``ip netns list`` that belong to a cluster with this prefix."""
    pattern = re.compile(rf"^{re.escape(prefix)}-(sw|n\d+)$")
    names = [line.split()[0] for line in sh(["ip", "netns", "list"]).splitlines() if line.strip()]
    return [n for n in names if pattern.match(n)]


def preflight() -> None:
    """Refuse early, in one line, where the cluster cannot be built."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise UsageError(
            f"missing {', '.join(missing)}: install them (Debian: apt-get install iproute2 "
            "util-linux)"
        )
    if not has_net_admin():
        raise UsageError(
            "the emulated cluster needs root (CAP_NET_ADMIN) to create network namespaces: "
            "run as root"
        )


def has_net_admin() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return os.geteuid() == 0


# ------------------------------------------------------------------ up


def up(spec: ClusterSpec, folder: Path) -> dict:
    """Build the cluster and write its state; on any failure remove what was built."""
    preflight()
    if (folder / STATE_FILE).exists():
        raise UsageError(
            f"a cluster is already up or its state is stale ({folder / STATE_FILE}): "
            "run `commbench cluster down` first"
        )
    left = namespaces_with_prefix(spec.prefix)
    if left:
        raise UsageError(
            f"namespaces {', '.join(left)} exist already: run `commbench cluster down` first"
        )
    folder.mkdir(parents=True, exist_ok=True)
    state = describe(spec)
    state["status"] = "building"
    _write_state(folder, state)
    try:
        _build(spec)
        _write_scripts(spec, folder)
    except BaseException:
        remove(spec.prefix, folder)
        raise
    state["status"] = "up"
    state["agent"] = str(folder / AGENT)
    state["rank_wrapper"] = str(folder / WRAPPER)
    _write_state(folder, state)
    return state


def _write_state(folder: Path, state: dict) -> None:
    tmp = folder / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(folder / STATE_FILE)


def _write_scripts(spec: ClusterSpec, folder: Path) -> None:
    for name, text in (
        (AGENT, agent_script(spec)),
        (WRAPPER, rank_wrapper_script(spec, str(folder / STATE_FILE))),
    ):
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)


def _build(spec: ClusterSpec) -> None:
    sw = spec.switch_netns
    for ns in spec.namespaces():
        sh(["ip", "netns", "add", ns])
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])
    for bridge in (spec.bridge, spec.mgmt_bridge):
        sh(["ip", "-n", sw, "link", "add", bridge, "type", "bridge"])
        sh(["ip", "-n", sw, "link", "set", bridge, "up"])
    for node in spec.all_nodes():
        ns = node.netns
        sh(in_ns(ns, ["sysctl", "-q", "-w", *NODE_SYSCTLS]))
        _veth(sw, node.mgmt_port, ns, node.mgmt, spec.mgmt_bridge)
        sh(["ip", "-n", ns, "addr", "add", f"{node.mgmt_address}/24", "dev", node.mgmt])
        sh(["ip", "-n", ns, "link", "set", node.mgmt, "up"])
        for nic in node.nics:
            _veth(sw, nic.port, ns, nic.name, spec.bridge)
            _nic(spec, ns, nic)


def _veth(sw: str, port: str, ns: str, iface: str, bridge: str) -> None:
    """A veth pair made directly in its two namespaces (never in the machine's own)."""
    sh(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", iface, "netns", ns])
    sh(["ip", "-n", sw, "link", "set", port, "master", bridge])
    sh(["ip", "-n", sw, "link", "set", port, "up"])


def _nic(spec: ClusterSpec, ns: str, nic: Nic) -> None:
    sh(["ip", "-n", ns, "addr", "add", f"{nic.address}/16", "dev", nic.name])
    sh(["ip", "-n", ns, "link", "set", nic.name, "up"])
    sh(["ip", "-n", ns, "rule", "add", "from", nic.address, "table", str(nic.table)])
    subnet = ".".join(nic.address.split(".")[:2]) + ".0.0/16"
    try:
        sh(["ip", "-n", ns, "route", "add", subnet, "dev", nic.name, "src", nic.address,
            "table", str(nic.table), "congctl", spec.tcp_congestion])  # fmt: skip
    except ClusterError as exc:
        raise congestion_error(spec, exc) from None
    shape_nic(spec, ns, nic)
    sh(in_ns(spec.switch_netns, port_qdisc_command(spec, nic)))


def congestion_error(spec: ClusterSpec, exc: ClusterError) -> ClusterError:
    """``exc`` said in one line when the kernel lacks the congestion control asked for."""
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    have = path.read_text().split() if path.is_file() else []
    if spec.tcp_congestion in have:
        return exc
    return ClusterError(
        f"this kernel has no TCP congestion control {spec.tcp_congestion!r} (it has "
        f"{', '.join(have) or 'none listed'}): give one of those with --tcp-congestion "
        "or the profile's tcp_congestion"
    )


def shape_nic(spec: ClusterSpec, ns: str, nic: Nic) -> None:
    """The node-side qdiscs of one NIC; netem (latency) only where the kernel has it."""
    try:
        for argv in node_qdisc_commands(spec, nic):
            sh(in_ns(ns, argv))
    except ClusterError as exc:
        if "netem" in str(exc) and "kind is unknown" in str(exc):
            raise ClusterError(
                "this kernel has no netem qdisc (sch_netem), which link latency needs: "
                "load it (modprobe sch_netem) or run without --latency"
            ) from None
        raise


# ------------------------------------------------------------------ down


def down(prefix: str, folder: Path) -> list[str]:
    """Remove the cluster; a clear error when there is nothing to remove."""
    if not (folder / STATE_FILE).exists() and not namespaces_with_prefix(prefix):
        raise UsageError(
            f"no emulated cluster {prefix!r} is up (no {folder / STATE_FILE}, no "
            f"{prefix}-* namespaces): nothing to take down"
        )
    return remove(prefix, folder)


def remove(prefix: str, folder: Path) -> list[str]:
    """End the processes inside the cluster's namespaces, delete them and the state."""
    names = namespaces_with_prefix(prefix)
    _end_processes(names)
    for ns in names:
        sh(["ip", "netns", "del", ns])
    for name in (STATE_FILE, STATE_FILE + ".tmp", AGENT, WRAPPER):
        (folder / name).unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    left = namespaces_with_prefix(prefix)
    if left:
        raise ClusterError(f"could not remove {', '.join(left)}: try `ip netns del NAME`")
    return names


def _end_processes(namespaces: list[str], grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL, to every process still inside these namespaces."""
    terminate(lambda: _pids(namespaces), grace_s)


def _pids(namespaces: list[str]) -> list[int]:
    pids: list[int] = []
    for ns in namespaces:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        pids += [int(p) for p in out.stdout.split() if p.isdigit() and int(p) != os.getpid()]
    return pids


# ------------------------------------------------------------------ status, faults


def counters(spec: ClusterSpec) -> dict[tuple[int, int], dict]:
    """Per rank NIC ``(node, local)``: bytes (and packets) sent, bytes received (node
    side) and switch drops."""
    out: dict[tuple[int, int], dict] = {}
    for node in spec.all_nodes():
        links = json.loads(sh(["ip", "-n", node.netns, "-j", "-s", "link", "show"]))
        stats = {link["ifname"]: link for link in links}
        for nic in node.nics:
            link = stats[nic.name]
            qdisc = json.loads(
                sh(["tc", "-n", spec.switch_netns, "-s", "-j", "qdisc", "show", "dev", nic.port])
            )
            out[(node.index, nic.local)] = {
                "tx_bytes": link["stats64"]["tx"]["bytes"],
                "tx_packets": link["stats64"]["tx"]["packets"],
                "rx_bytes": link["stats64"]["rx"]["bytes"],
                "up": "UP" in link.get("flags", []),
                "switch_drops": sum(q.get("drops", 0) for q in qdisc),
            }
    return out


#: TCP's loss-recovery counters ``cluster status`` shows per node (``/proc/net/snmp`` and
#: ``/proc/net/netstat`` of the node's namespace, counted since it was made): segments sent
#: again, retransmission timeouts, tail loss probes and fast retransmits
TCP_COUNTERS = {
    "Tcp.RetransSegs": "retrans",
    "TcpExt.TCPTimeouts": "timeouts",
    "TcpExt.TCPLossProbes": "probes",
    "TcpExt.TCPFastRetrans": "fast",
}


def parse_proc_net(text: str) -> dict[str, int]:
    """``/proc/net/snmp`` or ``/proc/net/netstat``: each protocol's header line and value
    line (``Tcp: RtoAlgorithm ...`` / ``Tcp: 1 ...``) -> ``{"Tcp.RtoAlgorithm": 1, ...}``."""
    out: dict[str, int] = {}
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        proto = head[0].rstrip(":")
        if values[:1] != head[:1] or len(values) != len(head):
            raise ClusterError(f"unexpected /proc/net line for {proto}: {' '.join(values)[:80]}")
        out.update({f"{proto}.{k}": int(v) for k, v in zip(head[1:], values[1:], strict=True)})
    return out


def tcp_counters(spec: ClusterSpec) -> dict[int, dict[str, int]]:
    """Per node: :data:`TCP_COUNTERS` of its namespace (every rank of a node shares them)."""
    out = {}
    for node in spec.all_nodes():
        text = sh(["ip", "netns", "exec", node.netns, "cat", "/proc/net/snmp", "/proc/net/netstat"])
        seen = parse_proc_net(text)
        out[node.index] = {name: seen.get(key, 0) for key, name in TCP_COUNTERS.items()}
    return out


def status_text(folder: Path) -> str:
    state = load_state(folder)
    spec = spec_from_dict(state["spec"])
    live = set(namespaces_with_prefix(spec.prefix))
    missing = [ns for ns in spec.namespaces() if ns not in live]
    lines = [
        f"emulated cluster {spec.prefix}: {spec.nodes} nodes x {spec.ranks_per_node} ranks, "
        f"NIC {spec.nic_mbit:g} Mbit/s ({spec.nic_GBps * 1e3:.1f} MB/s), latency "
        f"{spec.latency_us:g} us, switch queue {spec.switch_queue} pkts, "
        f"TCP {spec.tcp_congestion}"
        + (f", profile {spec.profile}" if spec.profile else "")
        + (f", shared memory {spec.shm_GBps:.2f} GB/s" if spec.shm_GBps else ""),
        f"state: {folder / STATE_FILE} ({state.get('status', '?')})",
    ]
    if missing:
        lines.append(f"MISSING namespaces: {', '.join(missing)} (run `commbench cluster down`)")
        return "\n".join(lines)
    lines.append(f"{'node':10s} {'nic':10s} {'address':12s} {'link':5s} "
                 f"{'tx MB':>10s} {'rx MB':>10s} {'drops':>8s}")  # fmt: skip
    by_nic = counters(spec)
    for node in spec.all_nodes():
        for nic in node.nics:
            c = by_nic[(node.index, nic.local)]
            lines.append(
                f"{node.hostname:10s} {nic.name:10s} {nic.address:12s} "
                f"{'up' if c['up'] else 'DOWN':5s} {c['tx_bytes'] / 1e6:10.2f} "
                f"{c['rx_bytes'] / 1e6:10.2f} {c['switch_drops']:8d}"
            )
    lines.append(f"{'node':10s} {'tcp retrans':>12s} {'timeouts':>9s} {'loss probes':>12s} "
                 f"{'fast retrans':>13s}")  # fmt: skip
    for index, c in tcp_counters(spec).items():
        lines.append(
            f"{spec.node(index).hostname:10s} {c['retrans']:12d} {c['timeouts']:9d} "
            f"{c['probes']:12d} {c['fast']:13d}"
        )
    return "\n".join(lines)


def parse_link(spec: ClusterSpec, text: str) -> Nic:
    """``NODE/RANK`` (node index / local rank) -> that NIC."""
    node, slash, local = text.partition("/")
    if not (slash and node.isdigit() and local.isdigit()):
        raise UsageError(f"--link {text!r}: write NODE/LOCAL_RANK, e.g. --link 1/0")
    if int(node) >= spec.nodes or int(local) >= spec.ranks_per_node:
        raise UsageError(
            f"--link {text}: the cluster has nodes 0-{spec.nodes - 1} and local ranks "
            f"0-{spec.ranks_per_node - 1}"
        )
    return spec.node(int(node)).nics[int(local)]


def fault(spec: ClusterSpec, nic: Nic, action: str, loss_pct: float | None = None) -> str:
    """Take a NIC down or up, make the wire from it lose frames, or stop the loss."""
    ns = spec.node(nic.node).netns
    if action in ("down", "up"):
        sh(["ip", "-n", ns, "link", "set", nic.name, action])
        return f"{ns} {nic.name} {action}"
    if action == "loss":
        if loss_pct is None:
            raise UsageError("`loss` needs --loss PERCENT, e.g. --loss 1 (--loss 0 removes it)")
    elif action == "restore":
        loss_pct = 0.0
    else:
        raise UsageError(f"unknown fault {action!r}: down, up, loss or restore")
    nft_in_switch(spec, ["-f", "-"], stdin=loss_script(nic, loss_pct))
    return f"{ns} {nic.name}: " + (f"{loss_pct:g}% loss on send" if loss_pct else "no loss")


def loss_drops(spec: ClusterSpec, nic: Nic) -> int | None:
    """Frames the loss fault dropped on ``nic``'s wire; None when it has no loss rule."""
    listing = json.loads(nft_in_switch(spec, ["-j", "list", "ruleset", LOSS_FAMILY]))
    rules = [
        item["rule"]
        for item in listing["nftables"]
        if item.get("rule", {}).get("table") == LOSS_TABLE
        and item["rule"]["chain"] == loss_chain(nic)
    ]
    if not rules:
        return None
    return sum(e["counter"]["packets"] for r in rules for e in r["expr"] if "counter" in e)
