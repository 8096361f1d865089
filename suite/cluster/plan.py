"""The emulated cluster as data: names, addresses, ``tc``/``nft`` arguments, launch lines.

Pure functions only (no ``ip``, no files), so everything here is tested without root.

Layout for prefix ``cb``, N nodes and G ranks per node:

* namespaces ``cb-n0`` .. ``cb-n{N-1}`` (hostnames the same) and the switch ``cb-sw``;
* rank NICs: ``cbnic{k}`` in node ``i`` (address ``10.77.i.(k+1)/16``), veth peer
  ``cbn{i}p{k}`` on the switch bridge ``cbbr``. Each NIC has its own routing table
  (``from ADDR lookup T``) so a rank's bytes leave through its own NIC;
* a management network for the launcher's daemons (unshaped, like a cluster's
  Ethernet next to its fabric): ``cbmgmt`` in each node (``10.78.0.(i+1)/24``), peer
  ``cbm{i}`` on bridge ``cbmg``. Taking a rank NIC down never cuts the launcher off.

TCP: every rank route names its congestion control (``congctl``, ``tcp_congestion``:
cubic unless the profile says otherwise), so the fabric is the same on every host
whatever the host's own default (BBR's pacing at a stale bandwidth estimate stalled
FAST's stages here: docs/emulated-cluster.md).

Shaping: a token bucket on each NIC's node side (what the rank sends) and on its switch
port (what it receives: where incast queues build up; ``switch_queue`` packets deep,
tail drop beyond). ``latency_us`` adds a netem delay on the node side.

Loss (a fault) is an nftables rule on the switch port's ingress: a share of the frames a
NIC sends vanish on the wire, and the sender's TCP learns of it only from missing ACKs,
as with a lossy link (a drop in the sender's own stack would be reported back to TCP as
a local error and retried without any loss recovery).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import asdict, dataclass

from commbench.errors import UsageError

DATA_NET = "10.77"  # /16: node i, local k -> 10.77.i.(k+1)
MGMT_NET = "10.78.0"  # /24: node i -> 10.78.0.(i+1)
MTU = 1500
FRAME_BYTES = MTU + 14
TCP_PAYLOAD_BYTES = MTU - 52  # IPv4 + TCP headers with timestamps
MAX_NODES = 16
MAX_RANKS_PER_NODE = 8
MAX_RANKS = 32
MAX_MBIT = 100_000.0
#: routing table of local NIC k (one per NIC, source-based routing)
TABLE_BASE = 100
#: what the sender's own qdisc may hold (TCP small queues keep it far below)
NODE_QUEUE_BYTES = 4 << 20
#: nftables table (in the switch) holding the loss rules; loss set in steps of 1/LOSS_RESOLUTION
LOSS_FAMILY = "netdev"
LOSS_TABLE = "commbench"
LOSS_RESOLUTION = 1_000_000

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{1,5}$")
_CONGESTION_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}$")  # a kernel TCP congestion control
DEFAULT_TCP_CONGESTION = "cubic"
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(kbit|mbit|gbit)?\s*$", re.IGNORECASE)
_RATE_UNIT = {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}


def parse_rate(text: str | float) -> float:
    """``"400mbit"`` / ``"1gbit"`` / ``"400"`` (Mbit/s) -> Mbit/s; must be positive."""
    m = _RATE_RE.match(str(text))
    if not m:
        raise UsageError(
            f"bad NIC rate {text!r}: give a number with kbit, mbit or gbit, e.g. --nic 400mbit"
        )
    mbit = float(m.group(1)) * _RATE_UNIT[(m.group(2) or "mbit").lower()]
    if not 0 < mbit <= MAX_MBIT:
        raise UsageError(
            f"NIC rate {text!r} is out of range: give more than 0 and at most {MAX_MBIT:g} mbit"
        )
    return mbit


@dataclass(frozen=True)
class Nic:
    """One rank's NIC: ``name`` inside the node, ``port`` its veth peer on the switch."""

    node: int
    local: int
    name: str
    port: str
    address: str
    table: int


@dataclass(frozen=True)
class Node:
    index: int
    netns: str
    hostname: str
    mgmt: str
    mgmt_port: str
    mgmt_address: str
    nics: tuple[Nic, ...]


@dataclass(frozen=True)
class ClusterSpec:
    """What ``commbench cluster up`` builds; validated on construction."""

    prefix: str
    nodes: int
    ranks_per_node: int
    nic_mbit: float
    latency_us: float = 0.0
    switch_queue: int = 1000
    profile: str | None = None
    shm_GBps: float | None = None  # measured at `up` when a profile scales from it
    stage_cost_us: float = 0.0  # one synchronised round of TCP exchanges (the profile's)
    tcp_congestion: str = DEFAULT_TCP_CONGESTION  # the rank routes' congestion control

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise UsageError(
                f"bad prefix {self.prefix!r}: 2-6 lower-case letters/digits, starting with a letter"
            )
        for name, value, top in (
            ("--nodes", self.nodes, MAX_NODES),
            ("--ranks-per-node", self.ranks_per_node, MAX_RANKS_PER_NODE),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise UsageError(f"{name} must be an integer from 1 to {top} (got {value!r})")
        if self.nodes < 2:
            raise UsageError("--nodes must be at least 2 (one node has no network to emulate)")
        if self.nodes * self.ranks_per_node > MAX_RANKS:
            raise UsageError(
                f"{self.nodes} nodes x {self.ranks_per_node} ranks = "
                f"{self.nodes * self.ranks_per_node} ranks do not fit: at most {MAX_RANKS}"
            )
        if not 0 < self.nic_mbit <= MAX_MBIT:
            raise UsageError(f"--nic must be more than 0 and at most {MAX_MBIT:g} mbit")
        if not (math.isfinite(self.latency_us) and 0 <= self.latency_us <= 1e6):
            raise UsageError(f"--latency must be 0 to 1000000 us (got {self.latency_us!r})")
        if isinstance(self.switch_queue, bool) or not 2 <= self.switch_queue <= 100_000:
            raise UsageError(
                f"--switch-queue must be 2 to 100000 packets (got {self.switch_queue})"
            )
        if not _CONGESTION_RE.match(str(self.tcp_congestion)):
            raise UsageError(
                f"bad --tcp-congestion {self.tcp_congestion!r}: give a kernel TCP congestion "
                "control by name, e.g. cubic or bbr"
            )

    # -------------------------------------------------------------- names

    @property
    def switch_netns(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}mg"

    @property
    def nic_prefix(self) -> str:
        """Rank NICs are ``nic_prefix + local index`` inside every node."""
        return f"{self.prefix}nic"

    @property
    def mgmt_iface(self) -> str:
        return f"{self.prefix}mgmt"

    @property
    def nranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def nic_GBps(self) -> float:
        """The NIC's line rate in GB/s (1e9 bytes/s)."""
        return self.nic_mbit / 8e3

    @property
    def payload_GBps(self) -> float:
        """What TCP carries of it at MTU 1500: 1448 data bytes per 1514-byte frame."""
        return self.nic_GBps * TCP_PAYLOAD_BYTES / FRAME_BYTES

    @property
    def stage_cost_bytes(self) -> int:
        """FAST's ``stage_cost_bytes``: the stage cost and the link's latency in TCP payload
        bytes one NIC carries meanwhile (the cost model's formula; imported here, as every
        rank imports this module and need not load the cost model)."""
        from commbench.kernels.model.fabric import stage_cost_bytes

        return stage_cost_bytes(
            stage_us=self.stage_cost_us, latency_us=self.latency_us, GBps=self.payload_GBps
        )

    def node(self, i: int) -> Node:
        ns = f"{self.prefix}-n{i}"
        nics = tuple(
            Nic(
                node=i,
                local=k,
                name=f"{self.nic_prefix}{k}",
                port=f"{self.prefix}n{i}p{k}",
                address=f"{DATA_NET}.{i}.{k + 1}",
                table=TABLE_BASE + k,
            )
            for k in range(self.ranks_per_node)
        )
        return Node(
            index=i,
            netns=ns,
            hostname=ns,
            mgmt=self.mgmt_iface,
            mgmt_port=f"{self.prefix}m{i}",
            mgmt_address=f"{MGMT_NET}.{i + 1}",
            nics=nics,
        )

    def all_nodes(self) -> list[Node]:
        return [self.node(i) for i in range(self.nodes)]

    def namespaces(self) -> list[str]:
        """Every namespace of this cluster, switch first."""
        return [self.switch_netns] + [n.netns for n in self.all_nodes()]

    def as_dict(self) -> dict:
        return asdict(self)


def spec_from_dict(data: dict) -> ClusterSpec:
    known = {f for f in ClusterSpec.__dataclass_fields__}
    return ClusterSpec(**{k: v for k, v in data.items() if k in known})


def describe(spec: ClusterSpec) -> dict:
    """The readable description stored in the state dir (``cluster.json``)."""
    return {
        "spec": spec.as_dict(),
        "fabric": fabric_metadata(spec),
        "switch": {
            "netns": spec.switch_netns,
            "bridge": spec.bridge,
            "mgmt_bridge": spec.mgmt_bridge,
        },
        "nodes": [
            {
                "index": n.index,
                "netns": n.netns,
                "hostname": n.hostname,
                "mgmt": {"iface": n.mgmt, "port": n.mgmt_port, "address": n.mgmt_address},
                "nics": [
                    {
                        "local": c.local,
                        "iface": c.name,
                        "port": c.port,
                        "address": c.address,
                        "table": c.table,
                        "rate_mbit": spec.nic_mbit,
                    }
                    for c in n.nics
                ],
            }
            for n in spec.all_nodes()
        ],
    }


def fabric_metadata(spec: ClusterSpec) -> dict:
    """What result records carry as ``emulated_fabric``."""
    return {
        "emulated": True,
        "profile": spec.profile,
        "nodes": spec.nodes,
        "ranks_per_node": spec.ranks_per_node,
        "nic_mbit": spec.nic_mbit,
        "nic_GBps": spec.nic_GBps,
        "latency_us": spec.latency_us,
        "switch_queue_pkts": spec.switch_queue,
        "shm_GBps": spec.shm_GBps,
        "stage_cost_us": spec.stage_cost_us,
        "tcp_congestion": spec.tcp_congestion,
    }


# ------------------------------------------------------------------ tc arguments


def burst_bytes(mbit: float) -> int:
    """Token bucket size: 1 ms at the rate, at least ten frames."""
    return max(10 * FRAME_BYTES, int(mbit * 1e6 / 8 * 1e-3))


def node_qdisc_commands(spec: ClusterSpec, nic: Nic) -> list[list[str]]:
    """``tc`` argv (to run inside the node) shaping what a rank sends, behind a netem
    delay stage when the link has latency."""
    rate = f"{spec.nic_mbit:g}mbit"
    tbf = ["tbf", "rate", rate, "burst", str(burst_bytes(spec.nic_mbit))]
    tbf += ["limit", str(NODE_QUEUE_BYTES)]
    dev = ["tc", "qdisc", "add", "dev", nic.name]
    if spec.latency_us <= 0:
        return [[*dev, "root", "handle", "1:", *tbf]]
    netem = ["netem", "delay", f"{spec.latency_us:g}us", "limit", "100000"]
    return [[*dev, "root", "handle", "1:", *netem], [*dev, "parent", "1:1", "handle", "10:", *tbf]]


def port_qdisc_command(spec: ClusterSpec, nic: Nic) -> list[str]:
    """``tc`` argv (inside the switch) for the port towards ``nic``: the receive side.

    Tail drop beyond ``switch_queue`` full frames: a shallow queue loses packets under
    incast the way a shallow-buffered switch does.
    """
    return [
        "tc", "qdisc", "add", "dev", nic.port, "root", "handle", "1:", "tbf",
        "rate", f"{spec.nic_mbit:g}mbit", "burst", str(burst_bytes(spec.nic_mbit)),
        "limit", str(max(spec.switch_queue * FRAME_BYTES, burst_bytes(spec.nic_mbit))),
    ]  # fmt: skip


def loss_chain(nic: Nic) -> str:
    return f"loss_{nic.port}"


def loss_script(nic: Nic, loss_pct: float) -> str:
    """``nft -f`` input (inside the switch) dropping ``loss_pct`` % of the frames that
    arrive from ``nic`` at random; 0 removes the rule. Idempotent either way."""
    if not (math.isfinite(loss_pct) and 0 <= loss_pct < 100):
        raise UsageError(f"--loss takes a percentage from 0 to below 100, e.g. 1 (got {loss_pct})")
    chain = f"{LOSS_FAMILY} {LOSS_TABLE} {loss_chain(nic)}"
    hook = f'{{ type filter hook ingress device "{nic.port}" priority 0; policy accept; }}'
    lines = [f"add table {LOSS_FAMILY} {LOSS_TABLE}", f"add chain {chain} {hook}"]
    if loss_pct == 0:
        return "\n".join([*lines, f"delete chain {chain}"]) + "\n"
    threshold = round(loss_pct / 100 * LOSS_RESOLUTION)
    rule = f"numgen random mod {LOSS_RESOLUTION} < {threshold} counter drop"
    return "\n".join([*lines, f"flush chain {chain}", f"add rule {chain} {rule}"]) + "\n"


# ------------------------------------------------------------------ launching


def enter_command(node: Node, argv: list[str]) -> list[str]:
    """Run ``argv`` inside ``node``: its network namespace and a fresh UTS one (hostname)."""
    return [
        "nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--uts", "--",
        "sh", "-c", 'hostname "$0" && exec "$@"', node.hostname, *argv,
    ]  # fmt: skip


def agent_script(spec: ClusterSpec) -> str:
    """PRRTE's ``plm_ssh_agent``: called as ``AGENT HOST COMMAND...`` like ssh, it runs
    the command line in HOST's node (HOST: its management address or hostname)."""
    cases = "\n".join(f"  {n.mgmt_address}|{n.hostname}) ns={n.netns} ;;" for n in spec.all_nodes())
    return f"""#!/bin/sh
# commbench emulated cluster {spec.prefix}: ssh stand-in for Open MPI's launcher.
host=$1
shift
case "$host" in
{cases}
  *) echo "commbench cluster agent: unknown host $host" >&2; exit 255 ;;
esac
exec nsenter --net=/run/netns/$ns unshare --uts -- sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
"""


#: Open MPI's TCP transport flags on the cluster: its defaults less ``put``. With ``put``,
#: ob1 moves a large message as an emulated RDMA put, and two ranks exchanging large
#: messages (both directions on their one connection) got half the NIC each way: 6.0
#: against 11.3 MB/s per direction for a ring shift, 2 MiB, 4x2 at 100 Mbit/s; without it
#: (ob1's send pipeline) 11.3 both, as plain TCP sockets measure both ways (10-11 MB/s).
#: RDMA fabrics do not halve an exchange; this one now does not either. Set
#: ``OMPI_MCA_btl_tcp_flags`` to override.
TCP_BTL_FLAGS = "send,inplace,need-ack,need-csum,hetero-rdma"


def rank_wrapper_script(spec: ClusterSpec, state_file: str) -> str:
    """Runs each rank with its own NIC for MPI's TCP transport (``nicK``, K = local rank)
    and the cluster's TCP flags (:data:`TCP_BTL_FLAGS`) unless the environment sets them."""
    return f"""#!/bin/sh
# commbench emulated cluster {spec.prefix}: rank K of a node talks TCP through NIC K.
export OMPI_MCA_btl_tcp_if_include={spec.nic_prefix}$OMPI_COMM_WORLD_LOCAL_RANK
export OMPI_MCA_btl_tcp_flags="${{OMPI_MCA_btl_tcp_flags:-{TCP_BTL_FLAGS}}}"
export COMMBENCH_CLUSTER={shlex.quote(state_file)}
exec "$@"
"""


def mpirun_command(
    spec: ClusterSpec,
    mpirun: str,
    wrapper: str,
    command: list[str],
    np: int | None = None,
    first_node: int = 0,
) -> list[str]:
    """The launcher line: one daemon per node over the management network, ranks filled
    node by node from ``first_node`` (rank 0's node; the others follow in order, wrapping
    round), TCP between nodes and shared memory inside."""
    np = spec.nranks if np is None else np
    if not 1 <= np <= spec.nranks:
        raise UsageError(f"-n {np} does not fit the cluster's {spec.nranks} rank slots")
    if not 0 <= first_node < spec.nodes:
        raise UsageError(f"--first-node {first_node}: the cluster has nodes 0-{spec.nodes - 1}")
    nodes = spec.all_nodes()
    nodes = [*nodes[first_node:], *nodes[:first_node]]
    hosts = ",".join(f"{n.mgmt_address}:{spec.ranks_per_node}" for n in nodes)
    return [
        mpirun, "--host", hosts, "-n", str(np), "--map-by", "slot",
        "--mca", "btl", "tcp,self,sm",
        "--prtemca", "oob_tcp_if_include", spec.mgmt_iface,
        "--mca", "oob_tcp_if_include", spec.mgmt_iface,
        wrapper, *command,
    ]  # fmt: skip
