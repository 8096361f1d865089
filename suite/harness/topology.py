"""Nodes x GPUs per node, and the node / rail sub-communicators built once.

On a cluster the node grouping comes from MPI (``COMM_TYPE_SHARED``); on one machine
``--gpus-per-node G`` forces a virtual grouping (8 ranks with G=4 are two emulated servers
of four GPUs). Ranks are renumbered so that world rank = node * G + local index, which is
the layout every algorithm assumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commbench.errors import UsageError


@dataclass(frozen=True)
class Layout:
    """Where one rank sits: pure arithmetic, no MPI."""

    rank: int
    size: int
    gpus_per_node: int

    @property
    def nodes(self) -> int:
        return self.size // self.gpus_per_node

    @property
    def node(self) -> int:
        return self.rank // self.gpus_per_node

    @property
    def local(self) -> int:
        return self.rank % self.gpus_per_node

    def to_world(self, group: str, peer: int) -> int:
        """World rank of ``peer``, a rank in ``group`` (world, node or rail) of this rank."""
        if group == "world":
            return peer
        if group == "node":
            return self.node * self.gpus_per_node + peer
        if group == "rail":
            return peer * self.gpus_per_node + self.local
        raise ValueError(f"unknown group {group!r} (world, node or rail)")


def check_gpus_per_node(size: int, gpus_per_node: int) -> None:
    if gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node must be at least 1 (got {gpus_per_node})")
    if size % gpus_per_node:
        raise UsageError(
            f"--gpus-per-node {gpus_per_node} does not divide the {size} ranks: "
            f"start a multiple of {gpus_per_node} ranks or pick a divisor of {size}"
        )


@dataclass
class Topology:
    """This rank's place and the communicators every algorithm uses.

    ``world`` is ordered by (node, local); ``node_comm`` holds this node's ranks (rank in
    it = local index); ``rail_comm`` holds the ranks of the same local index on every
    node (rank in it = node index).
    """

    rank: int
    size: int
    nodes: int
    gpus_per_node: int
    node: int
    local: int
    world: Any
    node_comm: Any
    rail_comm: Any
    hostname: str
    physical_nodes: int  # distinct hosts, whatever the emulated grouping says

    @classmethod
    def create(cls, comm: Any = None, gpus_per_node: int | None = None) -> Topology:
        """Build the topology from ``comm`` (default ``MPI.COMM_WORLD``); collective."""
        from mpi4py import MPI

        comm = comm or MPI.COMM_WORLD
        hostname = MPI.Get_processor_name()
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        host_leaders = comm.allgather(shared.allreduce(comm.rank, op=MPI.MIN))
        physical_nodes = len(set(host_leaders))
        if gpus_per_node is None:
            sizes = set(comm.allgather(shared.size))
            if len(sizes) != 1:
                shared.Free()
                raise UsageError(
                    f"nodes run different rank counts {sorted(sizes)}: start the same number "
                    "of ranks on every node or force --gpus-per-node"
                )
            gpus_per_node = sizes.pop()
            node_index = sorted(set(host_leaders)).index(host_leaders[comm.rank])
            key = node_index * gpus_per_node + shared.rank
        else:
            check_gpus_per_node(comm.size, gpus_per_node)
            key = comm.rank
        shared.Free()
        world = comm.Split(0, key)
        layout = Layout(world.rank, world.size, gpus_per_node)
        node_comm = world.Split(layout.node, layout.local)
        rail_comm = world.Split(layout.local, layout.node)
        return cls(
            rank=layout.rank,
            size=layout.size,
            nodes=layout.nodes,
            gpus_per_node=gpus_per_node,
            node=layout.node,
            local=layout.local,
            world=world,
            node_comm=node_comm,
            rail_comm=rail_comm,
            hostname=hostname,
            physical_nodes=physical_nodes,
        )

    def group(self, name: str) -> Any:
        """The communicator of a transport group: ``world``, ``node`` or ``rail``."""
        try:
            return {"world": self.world, "node": self.node_comm, "rail": self.rail_comm}[name]
        except KeyError:
            raise ValueError(f"unknown group {name!r} (world, node or rail)") from None

    def to_world(self, group: str, peer: int) -> int:
        """World rank of ``peer`` (a rank in ``group``)."""
        return Layout(self.rank, self.size, self.gpus_per_node).to_world(group, peer)

    def free(self) -> None:
        for c in (self.rail_comm, self.node_comm, self.world):
            c.Free()
