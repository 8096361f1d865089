"""Compiled core of the FAST scheduler (numba, cached on disk).

Imported lazily by :mod:`commbench.kernels.fast.scheduler` (the leading underscore keeps the plug-in
loader away from it), so importing :mod:`kernels` does not pay numba's start-up. Every
function releases the GIL (``nogil``), so a schedule can be made on another thread while
this one posts or waits (:func:`commbench.kernels.fast.scheduler.schedule_ahead`).

Everything is integer arithmetic in *units* (the alignment unit, ``unit`` bytes); a pair
of ``D`` bytes is ``ceil(D / unit)`` units whose last one may be short, so bytes are
recovered exactly (no tail is ever dropped).

Decomposition: Birkhoff-von Neumann on an S x S integer matrix whose rows and columns
all sum to ``L``. The perfect matching is kept between stages and *repaired*: after a
stage subtracts its weight, only the rows whose matched entry fell out of the allowed
set are unmatched, and each gets one augmenting path (Kuhn's DFS, iterative). The
allowed set is ``{A >= theta}`` with a threshold ``theta`` that only goes down:

- ``MODE_BVN``: ``theta = 1`` (any positive entry), the plain decomposition;
- ``MODE_BOTTLENECK``: ``theta`` is lowered exactly as far as needed, so every stage is
  a bottleneck matching (its smallest entry is as large as possible) - when a repair
  fails from row u, the next threshold is the largest entry from the rows its search
  reached to the columns it did not reach (any augmenting path must use such an edge);
- ``MODE_THRESHOLD``: the same, but ``theta`` drops to a power of two, so many entries
  share a level and leave together (Solstice-style).

A failed search from an unmatched row proves that no perfect matching exists in the
allowed set (the symmetric difference with a perfect one would contain an augmenting
path from that row), so lowering is always needed then, and with ``theta = 1`` a
perfect matching always exists because the line sums are equal.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MODE_BVN = 0
MODE_BOTTLENECK = 1
MODE_THRESHOLD = 2
_PAD = 16  # row padding of the decomposition's copy: one AVX-512 register of int32
_INT32_MAX = np.iinfo(np.int32).max


@njit(cache=True, nogil=True)
def _pow2_floor(x: int) -> int:
    r = 1
    while r * 2 <= x:
        r *= 2
    return r


@njit(cache=True, nogil=True, inline="always")
def _parts(w, stage_max):
    """Stages a stage of ``w`` units is cut into (``stage_max`` units each; <= 0: none)."""
    return 1 if stage_max <= 0 else (w + stage_max - 1) // stage_max


@njit(cache=True, nogil=True)
def decompose(A, line_sum, mode, max_stages, stage_cost, penalty, quantum, stage_max):
    """BvN stages of ``A`` (modified in place: it ends as the residual).

    Returns ``(perms, weights, nstages, residual_line_sum)``; ``perms[k, s]`` is the
    server that server s sends to in stage k. Stops after ``max_stages`` stages.

    ``stage_cost > 0`` (units; ``MODE_BOTTLENECK`` only): also stops as soon as no
    further stage can be kept by :func:`synthesize`'s stage-count cut (same
    ``stage_cost``, ``penalty``, ``quantum`` and ``stage_max``), so the cut keeps what it
    would keep from the whole decomposition. Bottleneck weights never grow (each is
    the largest smallest entry of a perfect matching, and entries only shrink), so once
    a stage's fixed cost outweighs the tail bytes it saves, every longer prefix that
    leaves a tail costs more; and one that leaves none needs at least ``ceil(rest /
    w)`` more stages, whose fixed costs give a lower bound to compare with the best.
    """
    if mode == MODE_BVN:  # its Kuhn search scans with early exits: it gains nothing below
        perms, weights, k, rest, ok = _stages(A, line_sum, mode, max_stages, stage_cost,
                                              penalty, quantum, stage_max)  # fmt: skip
    else:
        # The stages are made on a copy whose rows are padded with zero columns to a whole
        # number of vector registers (a zero is never allowed, raised or the widest: the
        # same stages), in int32 where the entries fit (twice the lanes per operation).
        n = A.shape[0]
        lo, hi = minmax(A) if n > 0 else (0, 0)
        width = -(-n // _PAD) * _PAD
        if lo >= 0 and hi <= _INT32_MAX:
            narrow = np.zeros((n, width), np.int32)
            narrow[:, :n] = A
            perms, weights, k, rest, ok = _stages(narrow, line_sum, mode, max_stages, stage_cost,
                                                  penalty, quantum, stage_max)  # fmt: skip
            A[:] = narrow[:, :n]
        else:
            wide = np.zeros((n, width), np.int64)
            wide[:, :n] = A
            perms, weights, k, rest, ok = _stages(wide, line_sum, mode, max_stages, stage_cost,
                                                  penalty, quantum, stage_max)  # fmt: skip
            A[:] = wide[:, :n]
    if not ok:
        raise ValueError("no perfect matching: line sums are not equal")
    return perms, weights, k, rest


@njit(cache=True, nogil=True)
def _stages(A, line_sum, mode, max_stages, stage_cost, penalty, quantum, stage_max):
    """:func:`decompose` of the first ``n = A.shape[0]`` columns of ``A`` (the others
    are zero), of any integer type (index arrays and scanned values take its type);
    ``(perms, weights, nstages, residual_line_sum, ok)``, ``ok`` False when a line sum
    differs (no perfect matching)."""
    n, m = A.shape
    match_row = np.full(n, -1, A.dtype)
    match_col = np.full(m, -1, A.dtype)
    seen = np.zeros(n, np.int64)
    stack = np.empty(n + 1, np.int64)
    ptr = np.empty(n + 1, np.int64)
    via = np.empty(n + 1, np.int64)
    best = np.empty(m, A.dtype)
    parent = np.empty(m, A.dtype)
    zero = A.dtype.type(0)

    def flip(c, root):
        """Augment along ``parent`` from the free column c back to ``root``."""
        while True:
            rr = parent[c]
            prev = match_row[rr]
            match_row[rr] = c
            match_col[c] = rr
            if rr == root:
                return
            c = prev

    def augment(root, stamp):
        """Kuhn's augmenting path (iterative DFS with lookahead) on the positive
        entries; False if there is none."""
        depth = 0
        stack[0] = root
        ptr[0] = 0
        while depth >= 0:
            r = stack[depth]
            if ptr[depth] == 0:
                for c in range(n):  # lookahead: a free column ends the path at once
                    if A[r, c] > 0 and match_col[c] < 0:
                        seen[c] = stamp
                        via[depth] = c
                        for d in range(depth, -1, -1):
                            match_col[via[d]] = stack[d]
                            match_row[stack[d]] = via[d]
                        return True
            advanced = False
            while ptr[depth] < n:
                c = ptr[depth]
                ptr[depth] += 1
                if A[r, c] > 0 and seen[c] != stamp:
                    seen[c] = stamp
                    via[depth] = c
                    depth += 1
                    stack[depth] = match_col[c]
                    ptr[depth] = 0
                    advanced = True
                    break
            if not advanced:
                depth -= 1
        return False

    def widest(root, theta):
        """Augment from ``root`` along the alternating path whose smallest free edge is
        largest, capped at ``theta`` (a bottleneck Dijkstra, O(S^2) at worst, less when
        a free column is reachable at the cap early). Returns that smallest edge, 0 if
        no augmenting path exists. ``best[c] < 0`` marks a settled column.

        Each scan is branch-free (it vectorizes); ties go to the first column, as in a
        scan that stops at its first hit."""
        row = A[root]
        top = zero
        for j in range(m):
            a = row[j]
            v = a if a < theta else theta
            best[j] = v
            parent[j] = root
            top = max(top, v)
        while True:
            if top == 0:
                return zero
            c = 0
            while best[c] != top:  # the first column at the top
                c += 1
            best[c] = -1
            r = match_col[c]
            if r < 0:
                flip(c, root)
                return top
            # relax from r. Unsettled best values are at most ``cur`` (it was the top), so
            # a free column this relax raises to ``cur`` can be taken at once: the first
            # such one is where a scan that stops at its first hit would stop (the
            # columns after it are not read again: the next search starts afresh).
            cur = top
            row = A[r]
            top = zero
            hit = False
            for j in range(m):
                bj = best[j]
                a = row[j]
                v = a if a < cur else cur
                raise_ = v > bj and bj >= 0
                best[j] = v if raise_ else bj
                parent[j] = r if raise_ else parent[j]
                top = max(top, v if raise_ else bj)
                hit |= raise_ and v == cur and match_col[j] < 0
            if hit:  # r is relaxed once per search: parent[j] == r means raised now
                j = 0
                while parent[j] != r or best[j] != cur or match_col[j] >= 0:
                    j += 1
                flip(j, root)
                return cur

    cap = max_stages if max_stages < n * n + 1 else n * n + 1
    perms = np.empty((max(cap, 1), n), np.int32)
    weights = np.empty(max(cap, 1), np.int64)
    rest = line_sum
    if rest <= 0 or max_stages <= 0:
        return perms[:0], weights[:0], 0, rest, True
    theta = A.dtype.type(1)  # allowed entries are at least theta, so positive
    if mode != MODE_BVN:
        theta = max(A.max(), theta)
    ceiling = theta  # no entry exceeds it (entries only shrink): "none" in the greedy scan
    stamp = 0
    k = 0
    cut = stage_cost > 0.0 and mode == MODE_BOTTLENECK
    done = 0
    fixed = 0.0
    cheapest = stage_cost + penalty * rest * quantum  # the cut's cost of no stage at all
    while True:
        # greedy pass: an unmatched row takes its smallest allowed free column (a tight
        # fit keeps large entries for later stages: measured fewer, larger stages)
        for r in range(n if mode != MODE_BVN else 0):
            if match_row[r] >= 0:
                continue
            row = A[r]
            low = ceiling
            allowed = False
            for c in range(m):  # branch-free: it vectorizes
                a = row[c]
                ok = a >= theta and match_col[c] < 0
                low = min(low, a if ok else ceiling)
                allowed |= ok
            if allowed:
                pick = 0  # the first allowed free column at the smallest entry
                while row[pick] != low or match_col[pick] >= 0:
                    pick += 1
                match_row[r] = pick
                match_col[pick] = r
        for r in range(n):
            if match_row[r] >= 0:
                continue
            if mode == MODE_BVN:
                stamp += 1
                if not augment(r, stamp):
                    return perms[:k], weights[:k], k, rest, False
                continue
            # the widest augmenting path: at the level if one exists, else it sets the next
            got = widest(r, theta)
            if got == 0:
                return perms[:k], weights[:k], k, rest, False
            if got < theta:
                theta = A.dtype.type(_pow2_floor(got)) if mode == MODE_THRESHOLD else got
        w = rest
        for r in range(n):
            a = A[r, match_row[r]]
            if a < w:
                w = a
        for r in range(n):
            c = match_row[r]
            perms[k, r] = c
            A[r, c] -= w
        weights[k] = w
        k += 1
        rest -= w
        if rest == 0 or k >= cap:
            break
        if cut:
            done += w * quantum
            fixed += _parts(w * quantum, stage_max) * stage_cost
            tail = rest * quantum
            cost = fixed + done + stage_cost + penalty * tail
            if cost < cheapest:
                cheapest = cost
            if (penalty - 1.0) * w * quantum <= stage_cost:
                more = (rest + w - 1) // w  # stages still needed to leave no tail
                if k + more > cap or fixed + done + tail + more * stage_cost > cheapest * 1.000001:
                    break
        for r in range(n):
            c = match_row[r]
            a = A[r, c]
            if a == 0 or a < theta:
                match_row[r] = -1
                match_col[c] = -1
    return perms[:k], weights[:k], k, rest, True


# ----------------------------------------------------------------------------- synthesis


@njit(cache=True, nogil=True)
def minmax(D):
    """Smallest and largest entry, in one pass."""
    lo = D[0, 0]
    hi = D[0, 0]
    for i in range(D.shape[0]):
        for j in range(D.shape[1]):
            x = D[i, j]
            if x < lo:
                lo = x
            if x > hi:
                hi = x
    return lo, hi


@njit(cache=True, nogil=True, inline="always")
def _units(d, unit, shift):
    """``ceil(d / unit)``; a shift when ``unit`` is a power of two (``shift >= 0``)."""
    if shift >= 0:
        return (d + unit - 1) >> shift
    return (d + unit - 1) // unit


@njit(cache=True, nogil=True)
def pad(M, line):
    """Add dummy entries so every row and column of ``M`` sums to ``line``.

    Diagonal first (a server "sending to itself" is an idle stage slot), then a
    north-west-corner fill over the remaining row and column deficits: O(S^2).
    """
    n = M.shape[0]
    dr = np.empty(n, np.int64)
    dc = np.empty(n, np.int64)
    for i in range(n):
        dr[i] = line - M[i, :].sum()
        dc[i] = line - M[:, i].sum()
    for i in range(n):
        x = min(dr[i], dc[i])
        M[i, i] += x
        dr[i] -= x
        dc[i] -= x
    i = 0
    j = 0
    while i < n and j < n:
        if dr[i] == 0:
            i += 1
        elif dc[j] == 0:
            j += 1
        else:
            x = min(dr[i], dc[j])
            M[i, j] += x
            dr[i] -= x
            dc[j] -= x


@njit(cache=True, nogil=True)
def region_rows(D, G, unit, shift, u0, u1, region, sums):
    """Rows ``u0 .. u1 - 1`` of ``region``: ``region[u, t]`` = units GPU u sends to server
    t (each pair rounded up on its own). Adds these rows' byte counts into ``sums``
    (P + 2 S): what each GPU receives, what each server sends to the others, less what
    each server receives from itself (:func:`lower_bound` finishes them). Row blocks
    are independent, so threads can share the pass (:class:`commbench.kernels.fast.Scheduler`'s
    ``threads``).

    With G a power of two a row's block sums are taken by pairwise halving (stride-2
    loops, which LLVM vectorises): ~4x the block-by-block loop at 1024 GPUs, where this
    pass is a large part of a schedule."""
    P = D.shape[0]
    S = P // G
    halve = G > 1 and G & (G - 1) == 0
    h = P // 2
    b1 = np.empty(max(h, 1), np.int64)
    b2 = np.empty(max(h, 1), np.int64)
    for u in range(u0, u1):
        row = D[u]
        su = u // G
        if halve:
            if shift >= 0:
                for v in range(h):
                    b1[v] = ((row[2 * v] + (unit - 1)) >> shift) + (
                        (row[2 * v + 1] + (unit - 1)) >> shift
                    )
            else:
                for v in range(h):
                    b1[v] = (row[2 * v] + (unit - 1)) // unit + (
                        row[2 * v + 1] + (unit - 1)
                    ) // unit
            n = h
            src = b1
            dst = b2
            while n > S:
                n //= 2
                for v in range(n):
                    dst[v] = src[2 * v] + src[2 * v + 1]
                src, dst = dst, src
            for t in range(S):
                region[u, t] = src[t]
        else:
            for t in range(S):
                nu = 0
                for v in range(t * G, t * G + G):
                    nu += _units(row[v], unit, shift)
                region[u, t] = nu
        total = 0
        for v in range(P):
            total += row[v]
            sums[v] += row[v]
        own = 0
        for v in range(su * G, su * G + G):
            own += row[v]
        sums[P + su] += total - own
        sums[P + S + su] -= own


@njit(cache=True, nogil=True)
def lower_bound(sums, G):
    """The busiest server's cross-server bytes, in or out, shared by its G NICs (bytes,
    rounded up), from :func:`region_rows`' ``sums`` over all rows."""
    S = (sums.shape[0]) // (G + 2)
    P = S * G
    busiest = 0
    for s in range(S):
        inn = sums[P + S + s]
        for v in range(s * G, s * G + G):
            inn += sums[v]
        busiest = max(busiest, sums[P + s], inn)
    return (busiest + G - 1) // G


@njit(cache=True, nogil=True)
def regions(D, G, unit, shift):
    """``(region, lb)``: :func:`region_rows` over every row, and :func:`lower_bound`."""
    P = D.shape[0]
    S = P // G
    region = np.empty((P, S), np.int64)
    sums = np.zeros(P + 2 * S, np.int64)
    region_rows(D, G, unit, shift, 0, P, region, sums)
    return region, lower_bound(sums, G)


@njit(cache=True, nogil=True)
def balance_caps(region, G):
    """``c[s, t]``: the units each GPU of server s sends to server t after balancing,
    ``ceil(sum of the G regions / G)`` (0 on the diagonal)."""
    P = region.shape[0]
    S = P // G
    c = np.zeros((S, S), np.int64)
    for s in range(S):
        for a in range(G):
            r = region[s * G + a]
            for t in range(S):
                c[s, t] += r[t]
        for t in range(S):
            c[s, t] = 0 if t == s else (c[s, t] + G - 1) // G
    return c


@njit(cache=True, nogil=True)
def balance_moves(region, c, G, server):
    """The balancing pieces, rows ``s, t, a, b, x0, n``: GPU a of server s hands units
    ``[x0, x0 + n)`` of its region for server t to GPU b (donors in order, each filling
    the receivers below ``c`` in order). Only the pairs (s, t) with s or t equal to
    ``server`` when it is >= 0 (all a plan for one of its ranks reads), in the same
    order as the whole list. Each move empties a donor or fills a receiver: at most
    G - 1 per server pair."""
    P = region.shape[0]
    S = P // G
    pairs = S * (S - 1) if server < 0 else 2 * (S - 1)
    moves = np.empty((max(pairs * (G - 1), 1), 6), np.int64)
    need = np.empty(G, np.int64)
    nm = 0
    for s in range(S):
        for t in range(S):
            if t == s or (server >= 0 and s != server and t != server):
                continue
            cst = c[s, t]
            for a in range(G):
                need[a] = max(cst - region[s * G + a, t], 0)
            b = 0
            for a in range(G):
                have = region[s * G + a, t]
                x = cst
                while x < have:
                    while need[b] == 0:
                        b += 1
                    n = min(have - x, need[b])
                    moves[nm, 0] = s
                    moves[nm, 1] = t
                    moves[nm, 2] = a
                    moves[nm, 3] = b
                    moves[nm, 4] = x
                    moves[nm, 5] = n
                    nm += 1
                    x += n
                    need[b] -= n
    return moves[:nm]


@njit(cache=True, nogil=True)
def synthesize(D, G, unit, shift, quantum, mode, cap, stage_cost, penalty, stage_max):
    """:func:`regions`, then :func:`synthesize_regions` (one call from Python)."""
    region, lb = regions(D, G, unit, shift)
    return synthesize_regions(region, lb, G, quantum, mode, cap, stage_cost, penalty, stage_max)


@njit(cache=True, nogil=True)
def synthesize_regions(region, lb, G, quantum, mode, cap, stage_cost, penalty, stage_max):
    """Balancing, server matrix, padding, decomposition and the stage-count cut, from
    the regions and lower bound (:func:`regions`) of a P x P matrix.

    ``quantum``: server-matrix entries are rounded up to this many
    units. ``cap``: most stages to compute (< 0: no limit). ``stage_cost`` (units, > 0
    enables the cut): keep the K stages that minimise
    ``K * stage_cost + sum(w[:K]) + [R > 0] * (stage_cost + penalty * R)``, with R the
    per-NIC capacity left for the fan-out tail. ``stage_max`` (units, > 0 enables it):
    every kept stage heavier than this is cut into ``ceil(w / stage_max)`` stages of the
    same permutation and (nearly) equal weights, the cut above counting each part's
    fixed cost; the parts are then ordered with the rest, largest first.

    Returns ``(region, c, line, lb_bytes, perms, weights, computed, tail)``:
    ``region[u, t]`` units u holds for server t, ``c[s, t]`` the per-GPU cap after
    balancing (the pieces that move are :func:`balance_moves`, made by the plans that
    need them), ``line`` = T in units, ``perms``/``weights`` the kept stages (largest
    first, weights in units), ``computed`` the stage count before the cut (the
    decomposition stops early where the cut could keep no more; see :func:`decompose`),
    ``tail[u, t]`` the units GPU u still holds for server t after the stages.
    """
    P = region.shape[0]
    S = P // G
    c = balance_caps(region, G)
    # server matrix in quanta, padded, decomposed
    M = np.empty((S, S), np.int64)
    for s in range(S):
        for t in range(S):
            M[s, t] = (c[s, t] + quantum - 1) // quantum
    line = 0
    for s in range(S):
        line = max(line, M[s, :].sum(), M[:, s].sum())
    pad(M, line)
    limit = cap if cap >= 0 else S * S + 1
    perms, weights, computed, rest = decompose(M, line, mode, limit, stage_cost, penalty,
                                               quantum, stage_max)  # fmt: skip
    order = np.argsort(-weights, kind="mergesort")
    perms = perms[order].copy()
    weights = weights[order] * quantum
    line *= quantum
    keep = computed
    if stage_cost > 0.0:
        best = np.inf
        done = 0
        fixed = 0.0
        for k in range(computed + 1):
            r = line - done
            cost = fixed + done
            if r > 0:
                cost += stage_cost + penalty * r
            if cost < best:
                best = cost
                keep = k
            if k < computed:
                done += weights[k]
                fixed += _parts(weights[k], stage_max) * stage_cost
    perms = perms[:keep].copy()
    weights = weights[:keep].copy()
    if stage_max > 0 and keep > 0 and weights[0] > stage_max:
        nparts = 0
        for k in range(keep):
            nparts += (weights[k] + stage_max - 1) // stage_max
        sp = np.empty((nparts, S), perms.dtype)
        sw = np.empty(nparts, np.int64)
        n = 0
        for k in range(keep):
            parts = (weights[k] + stage_max - 1) // stage_max
            base = weights[k] // parts
            extra = weights[k] - base * parts
            for i in range(parts):
                sp[n, :] = perms[k, :]
                sw[n] = base + (1 if i < extra else 0)
                n += 1
        order = np.argsort(-sw, kind="mergesort")
        perms = sp[order].copy()
        weights = sw[order].copy()
    # what each GPU still holds for each server after the kept stages
    capacity = np.zeros((S, S), np.int64)
    for k in range(weights.shape[0]):
        for s in range(S):
            capacity[s, perms[k, s]] += weights[k]
    # each GPU's pool for t after balancing (what it keeps, then what the donors of
    # its server hand it, receivers filled in order), less the stages' capacity; row
    # by row so the loops over t vectorise (on the diagonal c = 0, so the tail is 0)
    tail = np.empty((P, S), np.int64)
    spare = np.empty(S, np.int64)  # units the donors of server s hand out, per t
    for s in range(S):
        cs = c[s]
        cap_s = capacity[s]
        spare[:] = 0
        for a in range(G):
            r = region[s * G + a]
            for t in range(S):
                spare[t] += max(r[t] - cs[t], 0)
        for a in range(G):
            r = region[s * G + a]
            out = tail[s * G + a]
            for t in range(S):
                pool = min(r[t], cs[t])
                got = min(cs[t] - pool, spare[t])
                spare[t] -= got
                out[t] = max(pool + got - cap_s[t], 0)
    return region, c, line, lb, perms, weights, computed, tail


# ----------------------------------------------------------------------------- plans

# op columns (an executor reads them through the structured view in commbench.kernels.fast.plan)
NCOL = 10
KIND_SEND = 0
KIND_RECV = 1
KIND_COPY = 2
GROUP_NODE = 0
GROUP_RAIL = 1
GROUP_LOCAL = 2
BUF_SEND = 0
BUF_RECV = 1
BUF_BALANCE = 2
BUF_STAGE0 = 3
BUF_STAGE1 = 4
BUF_TAIL = 5
PHASE_INTRA = 0
PHASE_BALANCE = 1
PHASE_STAGE = 2
PHASE_REDISTRIBUTE = 3
PHASE_TAIL = 4


@njit(cache=True, nogil=True)
def build(D, G, unit, shift, region, c, perms, weights, tail_units, want, with_pieces,
          pipelined, ops_cap, pieces_cap, tail_step):  # fmt: skip
    """Walk the schedule and emit the per-rank ops (all ranks, or only rank ``want``).

    Returns ``(ops, rank_start, nops, pieces, npieces, bufbytes)``. ``ops`` rows are
    ``step, kind, group, peer, src_buf, src_off, dst_buf, dst_off, nbytes`` sorted by
    rank, then step, then posting order; rank r's rows are ``rank_start[r] :
    rank_start[r + 1]`` (all of them for ``want``); ``pieces`` rows ``phase, stage, src, dst, origin, final,
    nbytes, step`` (only with ``with_pieces``, which needs ``want < 0``); ``bufbytes[r]`` =
    bytes of BALANCE, STAGE0, STAGE1, TAIL on rank r (valid for ``want`` only when it is
    set). If ``nops > ops_cap`` or ``npieces > pieces_cap`` the tables were too small
    (they hold the first rows): call again with those sizes.

    ``pipelined``: the balance ranges rail step j reads are lent during step j (with rail
    step j - 1 and the redistribution of j - 2) instead of all in step 0; BALANCE keeps
    the same layout, so no op of a step touches what another op of it writes.

    ``tail_step``: the step the fan-out tail is posted in; <= 0 (or no stages): after
    the last stage (step K + 1, drained in step K + 2); else ``min(tail_step, K)``,
    alongside that rail step, drained one step later (its lending one step earlier).
    The tail still carries what the stages leave (the pools' ends), received into its
    own buffer, so posting it early changes no other op.

    With ``want >= 0`` only the pools that rank ``want`` sends from or whose bytes reach
    its server are walked, keyed compactly: O(K (S + G) + P G) instead of O(K P + P S).

    The helpers are closures on purpose: a call to another jitted function that takes
    arrays costs reference counting on every array argument (~100 ns a call here).
    """
    P = D.shape[0]
    S = P // G
    K = perms.shape[0]
    tail_at = K + 1 if tail_step <= 0 or K == 0 else min(tail_step, K)
    sw = want // G if want >= 0 else -1
    aw = want - sw * G
    moves = balance_moves(region, c, G, sw)
    # start[u, t]: where u's bytes for server t begin in u's send buffer (only row
    # ``want`` if set: another rank's offsets only go into ops that are dropped)
    start = np.zeros((P if want < 0 else 1, S), np.int64)
    # rdisp[o, f]: where o's bytes begin in f's receive buffer (only column ``want`` if set)
    rdisp = np.zeros((P, P if want < 0 else 1), np.int64)
    if want >= 0:
        acc = 0
        for t in range(S):
            start[0, t] = acc
            for v in range(t * G, t * G + G):
                acc += D[want, v]
        acc = 0
        for o in range(P):
            rdisp[o, 0] = acc
            acc += D[o, want]
    else:
        for u in range(P):
            acc = 0
            for t in range(S):
                start[u, t] = acc
                for v in range(t * G, t * G + G):
                    acc += D[u, v]
        for o in range(1, P):
            for f in range(P):
                rdisp[o, f] = rdisp[o - 1, f] + D[o - 1, f]
    ops = np.empty((max(ops_cap, 1), NCOL), np.int64)
    cnt = np.zeros(2, np.int64)  # ops, pieces emitted (possibly past the capacity)
    pcs = np.empty((max(pieces_cap, 1) if with_pieces else 1, 8), np.int64)
    bufbytes = np.zeros((P, 4), np.int64)
    nm = moves.shape[0]
    scratch = np.empty((G * G + G + 2, 4), np.int64)

    # pools: own kept prefix, then the received balance ranges (CSR by pool); with
    # ``want``, only the pools its plan reads - its server's GPUs' (G x S) and those
    # bound for its server (P) - so nothing here is O(P S)
    npools = P * S if want < 0 else G * S + P

    def pk(g, t):
        """The key of GPU g's pool for server t."""
        if want < 0:
            return g * S + t
        if g // G == sw:
            return (g - sw * G) * S + t
        return G * S + g

    keep = np.zeros(npools, np.int64)
    plen = np.zeros(npools, np.int64)
    for u in range(P):
        s = u // G
        for t in range(S) if want < 0 or s == sw else range(sw, sw + 1):
            if t != s:
                k = pk(u, t)
                keep[k] = min(region[u, t], c[s, t])
                plen[k] = keep[k]
    ptr = np.zeros(npools + 1, np.int64)
    for m in range(nm):
        k = pk(moves[m, 0] * G + moves[m, 3], moves[m, 1])
        ptr[k + 1] += 1
        plen[k] += moves[m, 5]
    for i in range(npools):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    idx = np.empty(max(nm, 1), np.int64)
    for m in range(nm):
        k = pk(moves[m, 0] * G + moves[m, 3], moves[m, 1])
        idx[fill[k]] = m
        fill[k] += 1
    # with ``want``: where pair (u, want) sits in u's region for want's server, in units
    wpre = np.zeros(P if want >= 0 else 1, np.int64)
    wlen = np.zeros(P if want >= 0 else 1, np.int64)
    if want >= 0:
        for u in range(P):
            acc = 0
            for v in range(sw * G, want):
                acc += _units(D[u, v], unit, shift)
            wpre[u] = acc
            wlen[u] = _units(D[u, want], unit, shift)
    # bal_off[m] + a byte offset in the donor's region = where move m puts that byte in BALANCE
    bal_off = np.zeros(max(nm, 1), np.int64)
    used = np.zeros(P, np.int64)
    # pipelined, with ``want``: lendto[b, t] = want lends to its peer b for server t
    lendto = np.zeros((G, S), np.bool_)
    if want >= 0 and pipelined:
        for m in range(nm):
            if moves[m, 0] == sw and moves[m, 2] == aw:
                lendto[moves[m, 3], moves[m, 1]] = True

    def op(rank, step, kind, group, peer, sbuf, soff, dbuf, doff, nbytes):
        if want >= 0 and rank != want:
            return
        n = cnt[0]
        cnt[0] = n + 1
        if n < ops.shape[0]:
            ops[n, 0] = rank
            ops[n, 1] = step
            ops[n, 2] = kind
            ops[n, 3] = group
            ops[n, 4] = peer
            ops[n, 5] = sbuf
            ops[n, 6] = soff
            ops[n, 7] = dbuf
            ops[n, 8] = doff
            ops[n, 9] = nbytes

    def piece(phase, stage, src, dst, origin, final, nbytes, step):
        n = cnt[1]
        cnt[1] = n + 1
        if n < pcs.shape[0]:
            pcs[n, 0] = phase
            pcs[n, 1] = stage
            pcs[n, 2] = src
            pcs[n, 3] = dst
            pcs[n, 4] = origin
            pcs[n, 5] = final
            pcs[n, 6] = nbytes
            pcs[n, 7] = step

    def rdsp(o, f):
        return rdisp[o, f] if want < 0 else rdisp[o, 0]

    def sdsp(u, t):
        return start[u, t] if want < 0 else start[0, t]

    def rel(u, t, x):
        """Byte offset of unit ``x`` of u's region for server t, from the region start."""
        acc = 0
        off = 0
        for v in range(t * G, t * G + G):
            d = D[u, v]
            n = _units(d, unit, shift)
            if x <= acc + n:
                return off + min((x - acc) * unit, d)
            acc += n
            off += d
        return off

    def split(u, t, x0, x1, k):
        """Append to ``scratch`` the pair pieces of region units ``[x0, x1)``: rows
        ``(origin, final, byte offset in the pair, bytes)``; returns the new count."""
        acc = 0
        for v in range(t * G, t * G + G):
            d = D[u, v]
            n = _units(d, unit, shift)
            lo = max(x0, acc)
            hi = min(x1, acc + n)
            if lo < hi:
                scratch[k, 0] = u
                scratch[k, 1] = v
                scratch[k, 2] = (lo - acc) * unit
                scratch[k, 3] = min((hi - acc) * unit, d) - (lo - acc) * unit
                k += 1
            acc += n
        return k

    def take(g, t, lo, hi, j):
        """Rail step ``j`` (``j == K``: the tail) for pool units ``[lo, hi)`` of GPU g for
        server t: at most two messages (own prefix from the send buffer, then the
        balance buffer), their receives, and the redistribution at step ``j + 2``."""
        s = g // G
        a = g - s * G
        h = t * G + a
        is_tail = j == K
        step = tail_at if is_tail else j + 1
        sbuf = BUF_TAIL if is_tail else (BUF_STAGE0 if j % 2 == 0 else BUF_STAGE1)
        phase = PHASE_TAIL if is_tail else PHASE_STAGE
        stage_id = -1 if is_tail else j
        key = pk(g, t)
        base_ptr = ptr[key]
        nranges = 1 + ptr[key + 1] - base_ptr
        # the sender's offsets matter only to the sender, the pieces to the receiving side
        sender = want < 0 or want == g
        pieces = with_pieces or want < 0 or want == h
        for seg in range(2):
            k = 0
            seg_off = -1
            seg_bytes = 0
            pos = 0
            for r in range(nranges):
                if pos >= hi or (seg == 0 and r > 0):
                    break  # the rest of the pool lies past [lo, hi) or in the other segment
                m = -1
                if r == 0:
                    rlen = keep[key]
                    owner = g
                    x0 = 0
                else:
                    m = idx[base_ptr + r - 1]
                    rlen = moves[m, 5]
                    owner = s * G + moves[m, 2]
                    x0 = moves[m, 4]
                a0 = max(lo, pos)
                a1 = min(hi, pos + rlen)
                pos += rlen
                if a0 >= a1 or (r == 0) != (seg == 0):
                    continue
                xa = x0 + a0 - (pos - rlen)
                xb = x0 + a1 - (pos - rlen)
                if pieces:  # the pieces' bytes are the range's: no second scan
                    k0 = k
                    k = split(owner, t, xa, xb, k)
                    for i in range(k0, k):
                        seg_bytes += scratch[i, 3]
                else:
                    seg_bytes += rel(owner, t, xb) - rel(owner, t, xa)
                if seg_off < 0 and sender:
                    seg_off = rel(owner, t, xa) + (sdsp(g, t) if r == 0 else bal_off[m])
            if seg_bytes == 0:
                continue
            op(g, step, KIND_SEND, GROUP_RAIL, t, BUF_SEND if seg == 0 else BUF_BALANCE,
               seg_off, -1, 0, seg_bytes)  # fmt: skip
            if not pieces:
                continue
            if with_pieces:
                for i in range(k):
                    piece(phase, stage_id, g, h, scratch[i, 0], scratch[i, 1], scratch[i, 3], step)
            if k == 1 and scratch[0, 1] == h:
                # one piece for the receiver itself: straight into its receive buffer
                op(h, step, KIND_RECV, GROUP_RAIL, s, -1, 0, BUF_RECV,
                   rdsp(scratch[0, 0], h) + scratch[0, 2], seg_bytes)  # fmt: skip
                continue
            base = bufbytes[h, 3] if is_tail else used[h]
            op(h, step, KIND_RECV, GROUP_RAIL, s, -1, 0, sbuf, base, seg_bytes)
            off = base
            for i in range(k):
                o = scratch[i, 0]
                f = scratch[i, 1]
                nb = scratch[i, 3]
                if f == h:
                    op(h, step + 1, KIND_COPY, GROUP_LOCAL, -1, sbuf, off, BUF_RECV,
                       rdsp(o, h) + scratch[i, 2], nb)  # fmt: skip
                else:
                    op(h, step + 1, KIND_SEND, GROUP_NODE, f - t * G, sbuf, off, -1, 0, nb)
                    op(f, step + 1, KIND_RECV, GROUP_NODE, a, -1, 0, BUF_RECV,
                       rdsp(o, f) + scratch[i, 2], nb)  # fmt: skip
                if with_pieces:
                    piece(PHASE_REDISTRIBUTE, stage_id, h, f, o, f, nb, step + 1)
                off += nb
            if is_tail:
                bufbytes[h, 3] += seg_bytes
            else:
                used[h] += seg_bytes

    def forwarded(g, t, lo, hi, step):
        """``want``'s receives for what its node peer h (g's rail partner in want's
        server t) gets from pool units ``[lo, hi)`` of g and forwards to it - the same
        pieces, in the same order, as :func:`take` emits for h."""
        s = g // G
        key = pk(g, t)
        base_ptr = ptr[key]
        nranges = 1 + ptr[key + 1] - base_ptr
        pos = 0
        for r in range(nranges):
            if pos >= hi:
                break  # the rest of the pool lies past [lo, hi)
            if r == 0:
                rlen = keep[key]
                owner = g
                x0 = 0
            else:
                m = idx[base_ptr + r - 1]
                rlen = moves[m, 5]
                owner = s * G + moves[m, 2]
                x0 = moves[m, 4]
            a0 = max(lo, pos)
            a1 = min(hi, pos + rlen)
            if a0 < a1:
                q0 = max(x0 + a0 - pos, wpre[owner])
                q1 = min(x0 + a1 - pos, wpre[owner] + wlen[owner])
                if q0 < q1:
                    b0 = (q0 - wpre[owner]) * unit
                    b1 = min((q1 - wpre[owner]) * unit, D[owner, want])
                    op(want, step, KIND_RECV, GROUP_NODE, g % G, -1, 0, BUF_RECV,
                       rdisp[owner, 0] + b0, b1 - b0)  # fmt: skip
            pos += rlen

    def lend(g, t, lo, hi, step):
        """Pipelined balancing: at ``step``, move the balance ranges that pool units
        ``[lo, hi)`` of GPU g for server t read from their donors into g's BALANCE
        buffer (at the offsets the prologue would use)."""
        s = g // G
        b = g - s * G
        key = pk(g, t)
        base_ptr = ptr[key]
        nranges = 1 + ptr[key + 1] - base_ptr
        pos = keep[key]
        for r in range(1, nranges):
            if pos >= hi:
                return
            m = idx[base_ptr + r - 1]
            rlen = moves[m, 5]
            a0 = max(lo, pos)
            a1 = min(hi, pos + rlen)
            donor = s * G + moves[m, 2]
            if a0 < a1 and (want < 0 or want == donor or want == g):
                x0 = moves[m, 4]
                xa = x0 + a0 - pos
                xb = x0 + a1 - pos
                ba = rel(donor, t, xa)
                bb = rel(donor, t, xb)
                if bb > ba:
                    op(donor, step, KIND_SEND, GROUP_NODE, b, BUF_SEND, sdsp(donor, t) + ba,
                       -1, 0, bb - ba)  # fmt: skip
                    op(g, step, KIND_RECV, GROUP_NODE, moves[m, 2], -1, 0, BUF_BALANCE,
                       bal_off[m] + ba, bb - ba)  # fmt: skip
                    if with_pieces:
                        k = split(donor, t, xa, xb, 0)
                        for i in range(k):
                            piece(PHASE_BALANCE, -1, donor, g, donor, scratch[i, 1],
                                  scratch[i, 3], step)  # fmt: skip
            pos += rlen

    # balance (step 0): receivers lay their ranges out by server, then arrival order
    for s in range(S):
        if sw >= 0 and s != sw:
            continue
        for g in range(s * G, s * G + G):
            off = 0
            for t in range(S):
                key = pk(g, t)
                for q in range(ptr[key], ptr[key + 1]):
                    m = idx[q]
                    donor = s * G + moves[m, 2]
                    b0 = rel(donor, t, moves[m, 4])
                    b1 = rel(donor, t, moves[m, 4] + moves[m, 5])
                    bal_off[m] = off - b0
                    off += b1 - b0
                    if pipelined:
                        continue
                    if want < 0 or want == donor or want == g:
                        op(donor, 0, KIND_SEND, GROUP_NODE, g - s * G, BUF_SEND,
                           sdsp(donor, t) + b0, -1, 0, b1 - b0)  # fmt: skip
                        op(g, 0, KIND_RECV, GROUP_NODE, moves[m, 2], -1, 0, BUF_BALANCE,
                           bal_off[m] + b0, b1 - b0)  # fmt: skip
                    if with_pieces:
                        k = split(donor, t, moves[m, 4], moves[m, 4] + moves[m, 5], 0)
                        for i in range(k):
                            piece(PHASE_BALANCE, -1, donor, g, donor, scratch[i, 1],
                                  scratch[i, 3], 0)  # fmt: skip
            bufbytes[g, 0] = off
    # intra-server traffic, direct over scale-up (step 1, overlapping the first stage)
    for u in range(P):
        s = u // G
        if sw >= 0 and s != sw:
            continue
        sd = sdsp(u, s)
        for v in range(s * G, s * G + G):
            d = D[u, v]
            if d > 0 and (want < 0 or want == u or want == v):
                if u == v:
                    op(u, 1, KIND_COPY, GROUP_LOCAL, -1, BUF_SEND, sd, BUF_RECV, rdsp(u, v), d)
                else:
                    op(u, 1, KIND_SEND, GROUP_NODE, v - s * G, BUF_SEND, sd, -1, 0, d)
                    op(v, 1, KIND_RECV, GROUP_NODE, u - s * G, -1, 0, BUF_RECV, rdsp(u, v), d)
                if with_pieces:
                    piece(PHASE_INTRA, -1, u, v, u, v, d, 1)
            sd += d

    # stages: rail step j at step j + 1, its redistribution at step j + 2; then the tail
    # (listed first, then emitted: a loop that emits is slower per iteration)
    pos = np.zeros(npools, np.int64)
    h_lo, h_hi = (0, P) if want < 0 else (want, want + 1)
    todo = np.empty((npools + 1, 4), np.int64)
    for j in range(K + 1):
        ntodo = 0
        if j < K:
            w = weights[j]
            for s in range(S):
                t = perms[j, s]
                if t == s or (sw >= 0 and s != sw and t != sw):
                    continue
                for a in range(G):
                    # pipelined: the pools of want's server it lends to
                    if sw >= 0 and t != sw and a != aw and not (s == sw and lendto[a, t]):
                        continue
                    g = s * G + a
                    k = pk(g, t)
                    n = min(w, plen[k] - pos[k])
                    if n > 0:
                        todo[ntodo, 0] = g
                        todo[ntodo, 1] = t
                        todo[ntodo, 2] = pos[k]
                        todo[ntodo, 3] = pos[k] + n
                        pos[k] += n
                        ntodo += 1
        else:
            for g in range(P):
                s = g // G
                # with ``want``, a GPU of another server has one pool that can matter
                for t in range(S) if sw < 0 or s == sw else range(sw, sw + 1):
                    if t == s or tail_units[g, t] == 0:
                        continue
                    if sw >= 0 and g != want and t != sw and not (s == sw and lendto[g - s * G, t]):
                        continue
                    k = pk(g, t)
                    todo[ntodo, 0] = g
                    todo[ntodo, 1] = t
                    todo[ntodo, 2] = pos[k]
                    todo[ntodo, 3] = plen[k]
                    ntodo += 1
        rail_step = tail_at if j == K else j + 1
        if pipelined:  # lend what rail step j reads during step j (the step before it)
            for i in range(ntodo):
                if sw < 0 or todo[i, 0] // G == sw:
                    lend(todo[i, 0], todo[i, 1], todo[i, 2], todo[i, 3], rail_step - 1)
        used[h_lo:h_hi] = 0  # another rank's offsets only go into ops that are dropped
        for i in range(ntodo):
            g = todo[i, 0]
            t = todo[i, 1]
            if want >= 0 and g != want and t * G + g % G != want:
                if t != sw:
                    continue  # a pool of want's server it only lends to
                # bound for want's server, landing on a peer: only what it forwards to want
                forwarded(g, t, todo[i, 2], todo[i, 3], rail_step + 1)
            else:
                take(g, t, todo[i, 2], todo[i, 3], j)
        if j < K:
            col = 1 + j % 2
            for h in range(h_lo, h_hi):  # with ``want`` only its own sizes can change
                if used[h] > bufbytes[h, col]:
                    bufbytes[h, col] = used[h]
    nops = cnt[0]
    npcs = cnt[1]
    # stable counting sort by (rank, step): each rank's ops in step order, posting order kept
    nkeys = (P if want < 0 else 1) * (K + 3)
    first = np.zeros(nkeys + 1, np.int64)
    n = min(nops, ops.shape[0])
    for i in range(n):
        first[(ops[i, 0] if want < 0 else 0) * (K + 3) + ops[i, 1] + 1] += 1
    for i in range(nkeys):
        first[i + 1] += first[i]
    rank_start = np.empty(P + 1, np.int64)
    for r in range(P + 1):
        rank_start[r] = first[min(r * (K + 3), nkeys)] if want < 0 else (0 if r <= want else n)
    rows = np.empty((n, NCOL - 1), np.int64)
    for i in range(n):
        key = (ops[i, 0] if want < 0 else 0) * (K + 3) + ops[i, 1]
        q = first[key]
        first[key] = q + 1
        for col in range(NCOL - 1):
            rows[q, col] = ops[i, col + 1]
    return rows, rank_start, nops, pcs[: min(npcs, pcs.shape[0])], npcs, bufbytes


@njit(cache=True, nogil=True)
def build_rank(D, G, unit, shift, region, c, perms, weights, tail_units, want, pipelined,
               ops_cap, tail_step):  # fmt: skip
    """:func:`build` for rank ``want`` alone: ``(rows, nops, balance, stage0, stage1,
    tail)`` - two arrays fewer to hand back to Python (each costs ~0.4 us)."""
    rows, _, nops, _, _, bufbytes = build(D, G, unit, shift, region, c, perms, weights,
                                          tail_units, want, False, pipelined, ops_cap, 1,
                                          tail_step)  # fmt: skip
    b = bufbytes[want]
    return rows, nops, b[0], b[1], b[2], b[3]


@njit(cache=True, nogil=True)
def ops_guess(stages, servers, gpus_per_node):
    """A rank's op count is rarely above this (the core says when it is)."""
    return 8 * (stages + servers + 1) * (gpus_per_node + 1) + 4 * servers * gpus_per_node + 64


@njit(cache=True, nogil=True)
def synthesize_rank(D, G, unit, shift, quantum, mode, cap, stage_cost, penalty, stage_max, want,
                    pipelined, tail_step, ops_cap):  # fmt: skip
    """:func:`synthesize`, then :func:`build_rank` for rank ``want``, in one call from
    Python (what a per-call scheduler pays for): the synthesis results, then ``rows,
    nops`` and the rank's four scratch sizes. ``ops_cap``: rows of the op table (<= 0:
    :func:`ops_guess` of the stage count); ``nops > len(rows)``: it was short."""
    region, c, line, lb, perms, weights, computed, tail = synthesize(
        D, G, unit, shift, quantum, mode, cap, stage_cost, penalty, stage_max
    )
    if ops_cap <= 0:
        ops_cap = ops_guess(weights.shape[0], D.shape[0] // G, G)
    rows, nops, b0, b1, b2, b3 = build_rank(
        D, G, unit, shift, region, c, perms, weights, tail, want, pipelined, ops_cap, tail_step)  # fmt: skip
    return region, c, line, lb, perms, weights, computed, tail, rows, nops, b0, b1, b2, b3


# ----------------------------------------------------------------------------- binding

# posting classes within a step: node sends, rail sends, node receives, rail receives, copies
NCLASSES = 5
CLASS_COPY = 4


@njit(cache=True, nogil=True)
def bind_order(rows, nsteps, world, node_base, g, local):
    """A plan's ops (``rows``: n x 9, the ``OP_FIELDS`` columns) in posting order, for
    :class:`commbench.kernels.fast.executor.PlanExecutor`.

    Returns ``(cols, bounds)``. ``cols`` (6 x n): per op in posting order its peer
    (a world rank when ``world``, else the rank in its group), buffer, start and end
    offset (a receive: where it writes; a send or copy: where it reads), and for a copy
    its destination buffer and offset. ``bounds`` (one row per non-empty step): the
    step's first op and the end of each posting class (node sends, rail sends, node
    receives, rail receives, copies).
    Within a class the plan's order is kept (messages between the same pair are matched
    in posting order).
    """
    n = rows.shape[0]
    nkeys = nsteps * NCLASSES
    count = np.zeros(nkeys + 1, np.int64)
    keys = np.empty(n, np.int64)
    for i in range(n):
        kind = rows[i, 1]
        cls = CLASS_COPY if kind == KIND_COPY else kind * 2 + rows[i, 2]
        keys[i] = rows[i, 0] * NCLASSES + cls
        count[keys[i] + 1] += 1
    for k in range(nkeys):
        count[k + 1] += count[k]
    cols = np.empty((6, n), np.int64)
    fill = count[:-1].copy()
    for i in range(n):
        q = fill[keys[i]]
        fill[keys[i]] = q + 1
        kind = rows[i, 1]
        peer = rows[i, 3]
        if world and kind != KIND_COPY:
            peer = node_base + peer if rows[i, 2] == GROUP_NODE else peer * g + local
        cols[0, q] = peer
        if kind == KIND_RECV:
            cols[1, q] = rows[i, 6]
            cols[2, q] = rows[i, 7]
        else:
            cols[1, q] = rows[i, 4]
            cols[2, q] = rows[i, 5]
        cols[3, q] = cols[2, q] + rows[i, 8]
        cols[4, q] = rows[i, 6]
        cols[5, q] = rows[i, 7]
    nonempty = 0
    for s in range(nsteps):
        if count[(s + 1) * NCLASSES] > count[s * NCLASSES]:
            nonempty += 1
    bounds = np.empty((nonempty, NCLASSES + 1), np.int64)
    j = 0
    for s in range(nsteps):
        first = count[s * NCLASSES]
        if count[(s + 1) * NCLASSES] == first:
            continue
        bounds[j, 0] = first
        for c in range(NCLASSES):
            bounds[j, c + 1] = count[s * NCLASSES + c + 1]
        j += 1
    return cols, bounds


@njit(cache=True, nogil=True)
def plan_steps(stages, tail_units, tail_step):
    """Steps of every rank's plan (:attr:`Schedule.nsteps`): balance, the rail steps
    (``stages``, and a last one for the tail when it follows them), the last drain."""
    last = tail_step == 0 or stages == 0
    return stages + (1 if last and (tail_units != 0).any() else 0) + 2


@njit(cache=True, nogil=True)
def synthesize_bound(D, G, unit, shift, quantum, mode, cap, stage_cost, penalty, stage_max, want,
                     pipelined, tail_step, ops_cap, world, node_base, local):  # fmt: skip
    """:func:`synthesize_rank`, then :func:`bind_order` of the rank's ops for an executor
    on this topology (``world``, ``node_base``, ``local``: the executor's), in one call
    from Python: ``fast+sched`` pays one call of the core per matrix. Returns
    :func:`synthesize_rank`'s values, then ``nsteps, cols, bounds`` (both empty when the
    op table was short: the caller builds again and binds later)."""
    out = synthesize_rank(D, G, unit, shift, quantum, mode, cap, stage_cost, penalty, stage_max,
                          want, pipelined, tail_step, ops_cap)  # fmt: skip
    weights, tail, rows, nops = out[5], out[7], out[8], out[9]
    nsteps = plan_steps(weights.shape[0], tail, tail_step)
    if nops > rows.shape[0]:
        return out + (nsteps, np.zeros((6, 0), np.int64), np.zeros((0, NCLASSES + 1), np.int64))
    cols, bounds = bind_order(rows[:nops], nsteps, world, node_base, G, local)
    return out + (nsteps, cols, bounds)
