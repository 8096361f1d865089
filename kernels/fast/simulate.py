"""Execute FAST per-rank plans for all ranks in one process, on numpy byte buffers.

This is the reference an executor is checked against: it applies exactly the rules in
:mod:`commbench.kernels.fast.plan` (per step: match every SEND with the RECV its peer posted in
the same group, in posting order, sizes equal; do the COPYs) and verifies that each
receive buffer ends up byte for byte as ``MPI_Alltoallv`` would leave it, with every
byte written exactly once.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from commbench.kernels.fast import plan as P


class PlanError(AssertionError):
    """A plan broke the executor contract or produced the wrong bytes."""


def alltoallv(traffic: np.ndarray, sendbufs: list[np.ndarray]) -> list[np.ndarray]:
    """What ``MPI_Alltoallv`` leaves in every rank's receive buffer (the reference)."""
    d = np.asarray(traffic, dtype=np.int64)
    n = d.shape[0]
    sdispl = np.zeros_like(d)
    np.cumsum(d[:, :-1], axis=1, out=sdispl[:, 1:])
    out = []
    for r in range(n):
        parts = [sendbufs[o][sdispl[o, r] : sdispl[o, r] + d[o, r]] for o in range(n)]
        out.append(np.concatenate(parts) if parts else np.zeros(0, np.uint8))
    return out


def random_sendbufs(traffic: np.ndarray, seed: int = 0) -> list[np.ndarray]:
    """Random send buffers (uint8) of the right size for every rank."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(n), dtype=np.uint8) for n in np.asarray(traffic).sum(axis=1)]


def execute(schedule, sendbufs: list[np.ndarray]) -> list[np.ndarray]:
    """Run every rank's plan; returns the receive buffers. ``PlanError`` on a broken
    plan (unmatched or mismatched messages, out-of-bounds offsets, a receive-buffer
    byte written twice or never)."""
    d = schedule.traffic
    nranks = schedule.nranks
    g = schedule.gpus_per_node
    plans = schedule.plans()
    bufs = []
    written = []
    for r, pl in enumerate(plans):
        b = {
            P.SEND_BUF: np.asarray(sendbufs[r], dtype=np.uint8),
            P.RECV_BUF: np.zeros(int(d[:, r].sum()), np.uint8),
        }
        if b[P.SEND_BUF].size != int(d[r].sum()):
            raise PlanError(
                f"rank {r}: send buffer has {b[P.SEND_BUF].size} bytes, "
                f"traffic says {int(d[r].sum())}"
            )
        for buf, size in pl.buffer_bytes.items():
            b[buf] = np.zeros(size, np.uint8)
        bufs.append(b)
        written.append(np.zeros(b[P.RECV_BUF].size, np.int64))
    steps = [dict(pl.steps()) for pl in plans]
    nsteps = max((pl.nsteps for pl in plans), default=0)

    def region(r: int, buf: int, off: int, n: int, what: str) -> tuple[np.ndarray, slice]:
        if buf not in bufs[r]:
            raise PlanError(f"rank {r}: {what} uses unknown buffer {buf}")
        arr = bufs[r][buf]
        if n <= 0 or off < 0 or off + n > arr.size:
            raise PlanError(
                f"rank {r}: {what} [{off}, {off + n}) outside "
                f"{P.BUFFER_NAMES[buf]} buffer of {arr.size} bytes"
            )
        return arr, slice(off, off + n)

    for step in range(nsteps):
        sends: dict = defaultdict(deque)
        recvs: dict = defaultdict(deque)
        copies = []
        for r in range(nranks):
            ops = steps[r].get(step)
            if ops is None:
                continue
            _check_step_hazards(r, step, ops)
            for op in ops:
                kind = int(op["kind"])
                if kind == P.COPY:
                    copies.append((r, op))
                    continue
                group, peer = int(op["group"]), int(op["peer"])
                if group == P.NODE:
                    if not 0 <= peer < g:
                        raise PlanError(f"rank {r} step {step}: node peer {peer} out of range")
                    other = (r // g) * g + peer
                elif group == P.RAIL:
                    if not 0 <= peer < nranks // g:
                        raise PlanError(f"rank {r} step {step}: rail peer {peer} out of range")
                    other = peer * g + r % g
                else:
                    raise PlanError(f"rank {r} step {step}: send/recv in group {group}")
                if kind == P.SEND:
                    sends[(group, r, other)].append(op)
                elif kind == P.RECV:
                    recvs[(group, other, r)].append(op)
                else:
                    raise PlanError(f"rank {r} step {step}: unknown op kind {kind}")
        # read every source first (ops of one step never depend on each other)
        moves = []
        for key in set(sends) | set(recvs):
            group, src, dst = key
            sq, rq = sends.get(key, deque()), recvs.get(key, deque())
            if len(sq) != len(rq):
                raise PlanError(
                    f"step {step}: {len(sq)} sends but {len(rq)} receives from "
                    f"rank {src} to rank {dst} ({'node' if group == P.NODE else 'rail'})"
                )
            for so, ro in zip(sq, rq, strict=True):
                if so["nbytes"] != ro["nbytes"]:
                    raise PlanError(
                        f"step {step}: rank {src} sends {so['nbytes']} bytes but "
                        f"rank {dst} expects {ro['nbytes']}"
                    )
                n = int(so["nbytes"])
                arr, sl = region(src, int(so["src_buf"]), int(so["src_off"]), n, "send")
                moves.append((dst, int(ro["dst_buf"]), int(ro["dst_off"]), arr[sl].copy()))
        for r, op in copies:
            n = int(op["nbytes"])
            arr, sl = region(r, int(op["src_buf"]), int(op["src_off"]), n, "copy source")
            moves.append((r, int(op["dst_buf"]), int(op["dst_off"]), arr[sl].copy()))
        for r, buf, off, data in moves:
            arr, sl = region(r, buf, off, data.size, "write")
            arr[sl] = data
            if buf == P.RECV_BUF:
                written[r][sl] += 1
        for r in range(nranks):
            ops = steps[r].get(step)
            if ops is not None and np.any(ops["step"] != step):
                raise PlanError(f"rank {r}: steps out of order")
    for r in range(nranks):
        bad = np.flatnonzero(written[r] != 1)
        if bad.size:
            i = int(bad[0])
            raise PlanError(f"rank {r}: receive-buffer byte {i} written {written[r][i]} times")
    return [b[P.RECV_BUF] for b in bufs]


def _check_step_hazards(rank: int, step: int, ops: np.ndarray) -> None:
    """The plan contract: no op of a step reads bytes another op of the step writes (an
    executor may run a step's ops in any order), and no two write the same bytes."""
    reads = ops[ops["kind"] != P.RECV]
    writes = ops[ops["kind"] != P.SEND]
    for buf in np.unique(writes["dst_buf"]):
        w = writes[writes["dst_buf"] == buf]
        order = np.argsort(w["dst_off"], kind="stable")
        lo, hi = w["dst_off"][order], (w["dst_off"] + w["nbytes"])[order]
        if (lo[1:] < hi[:-1]).any():
            raise PlanError(f"rank {rank} step {step}: two ops write the same bytes")
        r = reads[reads["src_buf"] == buf]
        if r.size:
            # a read [a, b) overlaps a write iff the last write starting before b ends after a
            i = np.searchsorted(lo, r["src_off"] + r["nbytes"], side="left") - 1
            hit = (i >= 0) & (hi[np.maximum(i, 0)] > r["src_off"])
            if hit.any():
                raise PlanError(
                    f"rank {rank} step {step}: an op reads {P.BUFFER_NAMES[int(buf)]} bytes "
                    "another op of the step writes"
                )


def check(schedule, seed: int = 0) -> None:
    """Execute the plans on random bytes; ``PlanError`` unless the result equals
    ``MPI_Alltoallv`` byte for byte (naming the first wrong rank, source and offset)."""
    send = random_sendbufs(schedule.traffic, seed)
    got = execute(schedule, send)
    want = alltoallv(schedule.traffic, send)
    d = schedule.traffic
    for r in range(schedule.nranks):
        if not np.array_equal(got[r], want[r]):
            i = int(np.flatnonzero(got[r] != want[r])[0])
            origin = int(np.searchsorted(np.cumsum(d[:, r]), i, side="right"))
            raise PlanError(f"rank {r}: receive byte {i} (from rank {origin}) is wrong")
