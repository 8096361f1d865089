"""``commbench cluster up|down|status|exec|fault``: the emulated cluster's command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from commbench.cluster import netns
from commbench.cluster.launcher import launch_env, measure_shm_GBps, run_bounded
from commbench.cluster.plan import (
    DEFAULT_TCP_CONGESTION,
    ClusterSpec,
    enter_command,
    mpirun_command,
    parse_rate,
)
from commbench.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "cluster",
        help="an emulated multi-node cluster on this machine (network namespaces, root)",
        description="Nodes are network namespaces, each rank has its own shaped NIC into a "
        "switch namespace, and Open MPI launches across them. Needs root.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    def common(q) -> None:
        q.add_argument("--prefix", default=netns.DEFAULT_PREFIX, help="name prefix (default cb)")
        q.add_argument(
            "--state", default=None, help="state dir (default /run/commbench-cluster/PREFIX)"
        )

    q = verbs.add_parser("up", help="build the cluster")
    common(q)
    q.add_argument("--profile", default=None, help="emulated fabric in jobs/emulated (h200, ...)")
    q.add_argument("--nodes", type=int, default=None, help="node count (default 2)")
    q.add_argument("--ranks-per-node", type=int, default=None, help="ranks (NICs) per node (2)")
    q.add_argument("--nic", default=None, help="NIC rate, e.g. 400mbit (default: the profile's)")
    q.add_argument("--latency", type=float, default=None, help="one-way link latency in us")
    q.add_argument("--switch-queue", type=int, default=None, help="switch port queue, packets")
    q.add_argument("--tcp-congestion", default=None, metavar="NAME",
                   help="the ranks' TCP congestion control (default: the profile's, else cubic)")  # fmt: skip
    q.set_defaults(func=cmd_up)

    q = verbs.add_parser("down", help="remove the cluster (also after a crash)")
    common(q)
    q.set_defaults(func=cmd_down)

    q = verbs.add_parser("status", help="nodes, NICs, rates, bytes and drops per NIC")
    common(q)
    q.add_argument("--json", action="store_true", help="counters as JSON")
    q.set_defaults(func=cmd_status)

    q = verbs.add_parser(
        "exec",
        help="run a command on the cluster: under mpirun on every rank, or on one --node",
        description="`commbench cluster exec -- commbench run alltoallv --impl fast ...` "
        "starts mpirun inside node 0 with one rank per NIC.",
    )
    common(q)
    q.add_argument("-n", "--np", type=int, default=None, help="ranks (default: every slot)")
    q.add_argument("--node", type=int, default=None, help="run COMMAND once, in this node")
    q.add_argument("--launch-node", type=int, default=0,
                   help="the node whose namespace runs mpirun (default 0)")  # fmt: skip
    q.add_argument("--first-node", type=int, default=0,
                   help="the node of rank 0; ranks fill the nodes from it in order, wrapping "
                        "round (default 0): what follows a rank, not its node, moves with it")  # fmt: skip
    q.add_argument("--timeout", type=float, default=1800, help="seconds before it is ended")
    q.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    q.set_defaults(func=cmd_exec)

    q = verbs.add_parser("fault", help="take a rank's NIC down/up or make it lossy")
    common(q)
    q.add_argument("--link", required=True, help="NODE/LOCAL_RANK, e.g. 1/0")
    q.add_argument("action", choices=("down", "up", "loss", "restore"))
    q.add_argument("--loss", type=float, default=None, help="percent lost (`loss`; 0 removes it)")
    q.set_defaults(func=cmd_fault)

    add_slurm_parser(verbs, common)


def _folder(args) -> Path:
    return netns.state_dir(args.prefix, args.state)


def spec_from_args(args) -> ClusterSpec:
    """Profile values, overridden by flags; the NIC rate from ``--nic`` or the profile."""
    prof = None
    if args.profile:
        from commbench.cluster.profiles import load_emulated_profile

        prof = load_emulated_profile(args.profile)

    def pick(flag, key, default):
        return flag if flag is not None else getattr(prof, key) if prof else default

    nodes = pick(args.nodes, "nodes", 2)
    rpn = pick(args.ranks_per_node, "ranks_per_node", 2)
    if args.nic is not None:
        nic = parse_rate(args.nic)
    elif prof is not None:
        nic = None
    else:
        raise UsageError("give the NIC rate (--nic 400mbit) or a --profile that scales it")
    spec_args = dict(
        prefix=args.prefix,
        nodes=nodes,
        ranks_per_node=rpn,
        nic_mbit=nic or 1.0,
        latency_us=pick(args.latency, "latency_us", 0.0),
        switch_queue=pick(args.switch_queue, "switch_queue", 1000),
        tcp_congestion=pick(args.tcp_congestion, "tcp_congestion", DEFAULT_TCP_CONGESTION),
        profile=args.profile,
        stage_cost_us=prof.stage_cost_us if prof else 0.0,
    )
    ClusterSpec(**spec_args)  # validate before measuring anything
    if nic is None:
        shm = measure_shm_GBps()
        spec_args.update(nic_mbit=prof.nic_mbit(shm), shm_GBps=round(shm, 3))
    return ClusterSpec(**spec_args)


def cmd_up(args) -> int:
    spec = spec_from_args(args)
    folder = _folder(args)
    netns.up(spec, folder)
    print(netns.status_text(folder))
    return 0


def cmd_down(args) -> int:
    from commbench.cluster import slurm

    folder = _folder(args)
    stopped = slurm.remove(folder)  # its Slurm first: munged runs outside the namespaces
    if stopped:
        print(f"stopped: {', '.join(stopped)}")
    removed = netns.down(args.prefix, folder)
    print(f"removed {len(removed)} namespaces: {' '.join(removed) or '(none)'}")
    return 0


def cmd_status(args) -> int:
    folder = _folder(args)
    if args.json:
        spec = netns.load_spec(folder)
        by_nic = netns.counters(spec)
        print(json.dumps({f"{n}/{k}": c for (n, k), c in by_nic.items()}))
    else:
        print(netns.status_text(folder))
    return 0


def cmd_fault(args) -> int:
    spec = netns.load_spec(_folder(args))
    nic = netns.parse_link(spec, args.link)
    print(netns.fault(spec, nic, args.action, args.loss))
    return 0


def cmd_exec(args) -> int:
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("give the command after --, e.g. cluster exec -- commbench run ...")
    folder = _folder(args)
    state = netns.load_state(folder)
    spec = netns.load_spec(folder)
    if state.get("status") != "up":
        raise UsageError(f"the cluster in {folder} is not up: run `commbench cluster down`")
    if argv[0] == "commbench":
        argv = [sys.executable, "-m", "commbench", *argv[1:]]
    if args.node is not None:
        if not 0 <= args.node < spec.nodes:
            raise UsageError(f"--node {args.node}: the cluster has nodes 0-{spec.nodes - 1}")
        if args.launch_node or args.first_node:
            raise UsageError("--node runs one command, without mpirun: drop --launch-node and "
                             "--first-node, or --node")  # fmt: skip
        cmd = enter_command(spec.node(args.node), argv)
    else:
        if not 0 <= args.launch_node < spec.nodes:
            raise UsageError(
                f"--launch-node {args.launch_node}: the cluster has nodes 0-{spec.nodes - 1}"
            )
        mpirun = str(Path(sys.executable).parent / "mpirun")
        line = mpirun_command(spec, mpirun, state["rank_wrapper"], argv, args.np, args.first_node)
        cmd = enter_command(spec.node(args.launch_node), line)
    return run_bounded(cmd, launch_env(spec, state), args.timeout)


# ------------------------------------------------------------------ Slurm on the cluster


def add_slurm_parser(verbs, common) -> None:
    q = verbs.add_parser(
        "slurm",
        help="a multi-node Slurm on the cluster: start|stop|status, or run a client command",
        description="slurmctld in node 0, one slurmd per node (its own hostname and "
        "address), munge through a socket in the state dir. Submit with `commbench jobs "
        "submit --system local-cluster`; `slurm exec -- squeue` runs a client command.",
    )
    actions = q.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, text in (
        ("start", "start the daemons (idempotent) and wait until every node is idle"),
        ("stop", "stop every daemon started here (idempotent)"),
        ("status", "daemons, nodes and the queue; exit 1 when a daemon is not running"),
        ("exec", "run a Slurm client command where the controller answers"),
    ):
        a = actions.add_parser(name, help=text)
        common(a)
        if name == "start":
            a.add_argument("--timeout", type=float, default=60, help="seconds to wait")
        if name == "exec":
            a.add_argument("argv", nargs=argparse.REMAINDER, help="-- squeue|scancel ...")
        a.set_defaults(func=cmd_slurm)


def cmd_slurm(args) -> int:
    from commbench.cluster import slurm

    folder = _folder(args)
    if args.action == "start":
        print(slurm.start(folder, args.timeout))
    elif args.action == "stop":
        stopped = slurm.stop(folder)
        print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    elif args.action == "status":
        ok, text = slurm.status(folder)
        print(text)
        return 0 if ok else 1
    else:
        argv = args.argv[1:] if args.argv[:1] == ["--"] else list(args.argv)
        if not argv:
            raise UsageError("give the client command after --, e.g. slurm exec -- squeue")
        spec = slurm.check_running(folder)
        return subprocess.run(slurm.client_command(spec, folder, argv)).returncode
    return 0
