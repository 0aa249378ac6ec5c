"""Reference twin of ``kilter._native.domainset``: the exact choice of a pod set's scale-up domains.

``objective`` is the one written form of what the search minimises; tests
hold the search to it by brute force. ``choose`` is the dynamic programme the
core runs, on whole classes of alike domains (the core cuts short classes
into single domains and runs long classes of free ones through a monotone
queue). The objective is a total order, so every exact method agrees with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter._native.twin.domains import FleetBitmap

MAX_TAKE = 32767  # items per class: a decision is 15 bits of count and a flag
INF = 1 << 62
VALUE_LIMIT = 1 << 61  # packed objective values stay below this, so INF plus two increments fits in int64

Chooser = Callable[[FleetBitmap, Sequence[int], Sequence[bool], int], list[int]]


def block_key(fl: FleetBitmap, d: int) -> tuple[int, ...]:
    """Domain d's block as a rank-order key: its group path from the top level down, plus d if a label is missing."""
    path = tuple(fl.group[level][d] for level in reversed(range(fl.n_levels)))
    return path if min(path, default=0) >= 0 else (*path, d)


def search_key(fl: FleetBitmap, caps: Sequence[int], d: int) -> tuple[object, ...]:
    """The order the search meets domains in: block in rank order, capacity, wholly idle, idle GPUs, index."""
    return (block_key(fl, d), caps[d], int(fl.is_wholly_free(d)), fl.domain_free[d], d)


def rank_key(fl: FleetBitmap, d: int) -> tuple[int, ...]:
    """The order of a plan's domains in its ranks: group path from the top level down, then index."""
    return (*(fl.group[level][d] for level in reversed(range(fl.n_levels))), d)


def group_path(fl: FleetBitmap, d: int, level: int) -> tuple[int, ...]:
    """Domain d's group at ``level`` as its label path; an unlabeled step makes d a group of its own."""
    path = tuple(fl.group[lv][d] for lv in range(level, fl.n_levels))
    return path if min(path, default=0) >= 0 else (-1, d)


def objective(fl: FleetBitmap, caps: Sequence[int], chosen: Sequence[int]) -> tuple[object, ...]:
    """What the search minimises, in order; the last entry (later domains in search order lose) makes it total."""
    groups = [len({group_path(fl, d, level) for d in chosen}) for level in range(fl.n_levels)]
    return (
        len(chosen),
        *groups,
        sum(caps[d] for d in chosen),
        sum(fl.is_wholly_free(d) for d in chosen),
        sum(caps[d] ** 2 for d in chosen),
        sum(fl.domain_free[d] for d in chosen),
        tuple(sorted((search_key(fl, caps, d) for d in chosen), reverse=True)),
    )


def fewest(caps: Sequence[int], live: Sequence[bool], need: int) -> tuple[int, int, int]:
    """(k, c*, slack): the fewest live domains covering ``need`` (0 if none), the k-th largest capacity, and
    the sum of the k largest less ``need`` (below c*, since k - 1 domains fall short)."""
    top = 0
    ordered = sorted((c for c, ok in zip(caps, live, strict=True) if ok), reverse=True)
    for i, c in enumerate(ordered):
        top += c
        if top >= need:
            return i + 1, c, top - need
    return 0, 0, 0


def changed_levels(fl: FleetBitmap, a: int, b: int) -> int:
    """How many levels, from the block up, start a new group between consecutive candidates a and b."""
    m = 0
    for level in range(fl.n_levels):
        if fl.group[level][a] != fl.group[level][b] or fl.group[level][b] < 0:
            m = level + 1
    return m


Grid = list[list[int]]


@dataclass
class _Class:
    """Alike candidates of one block (capacity, idleness, idle GPUs), taken m at a time."""

    items: list[int]
    take_cost: int  # c* - cap when cap < c*: the loss taking one adds
    skip_cost: int  # cap - c* when cap > c*: the loss leaving one out adds
    value: int  # packed (wholly idle, cap^2, idle GPUs) of one item
    shift: int = 0  # skip costs of the block's earlier classes
    decided: list[list[tuple[int, bool]]] = field(default_factory=list)  # [t][loss]: (items taken, from a closed layer)


@dataclass
class _Block:
    """Candidates of one level-0 group (or one unlabeled domain), in search order."""

    levels: int  # levels whose group changes where the block starts; 0 for the first
    classes: list[_Class] = field(default_factory=list)
    merged: Grid = field(default_factory=list)  # [t][loss]: the layer merged into layer `levels`
    closed_from: Grid = field(default_factory=list)  # [t][loss]: the closed layer the best closed source came from
    shift: int = 0  # skip costs of all its classes


def _grid(k: int, slack: int, fill: int = INF) -> Grid:
    return [[fill] * (slack + 1) for _ in range(k + 1)]


def _pack(
    fl: FleetBitmap, caps: Sequence[int], cands: list[int], k: int, group_radix: list[int]
) -> tuple[int, list[int]]:
    """The radix of the (wholly idle, cap^2, idle GPUs) part and each candidate's packed part, less the minima.

    Each criterion sums over k items to below its radix, so integer order is
    lexicographic order. Beyond any real fleet (a product of 2^61 or more) the
    least significant criteria are dropped, group levels last, coarsest first:
    a dropped level's entry in ``group_radix`` becomes 1.
    """
    comps = [
        [int(fl.is_wholly_free(d)) for d in cands],
        [caps[d] ** 2 for d in cands],
        [fl.domain_free[d] for d in cands],
    ]
    lows = [min(c) for c in comps]
    radix = [k * (max(c) - lo) + 1 for c, lo in zip(comps, lows, strict=True)]
    n_group = len(group_radix)
    for j in range(n_group + 3):
        if _product([*group_radix, *radix]) < VALUE_LIMIT:
            break
        dropped = n_group + 2 - j
        if dropped >= n_group:
            radix[dropped - n_group] = 1
        else:
            group_radix[dropped] = 1
    values = []
    for i in range(len(cands)):
        v = 0
        for j in range(3):
            v = v * radix[j] + (comps[j][i] - lows[j] if radix[j] > 1 else 0)
        values.append(v)
    return radix[0] * radix[1] * radix[2], values


def _product(xs: Sequence[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _openings(group_radix: list[int], rest: int) -> list[int]:
    """[layer]: what taking a domain adds when the layer's closed levels (0 .. layer-1) open."""
    inc = [0]
    for level in range(len(group_radix)):
        weight = 0 if group_radix[level] == 1 else rest * _product(group_radix[level + 1 :])
        inc.append(inc[-1] + weight)
    return inc


def _blocks(fl: FleetBitmap, caps: Sequence[int], cands: list[int], c_star: int, values: list[int]) -> list[_Block]:
    blocks: list[_Block] = []
    for i, d in enumerate(cands):
        m = changed_levels(fl, cands[i - 1], d) if i else 0
        if i == 0 or m > 0:
            blocks.append(_Block(m))
        classes = blocks[-1].classes
        prev = cands[i - 1]
        if (
            classes
            and len(classes[-1].items) < MAX_TAKE
            and caps[prev] == caps[d]
            and fl.is_wholly_free(prev) == fl.is_wholly_free(d)
            and fl.domain_free[prev] == fl.domain_free[d]
        ):
            classes[-1].items.append(d)
        else:
            classes.append(_Class([d], max(0, c_star - caps[d]), max(0, caps[d] - c_star), values[i]))
    return blocks


def choose(fl: FleetBitmap, caps: Sequence[int], live: Sequence[bool], need: int) -> list[int]:
    """The domain set minimising ``objective`` among sets of the fewest live domains covering ``need``; [] if none.

    Layers: layer j holds the states whose current groups at levels 0 .. j-1
    have no taken domain yet (layer 0: the current block is open).
    """
    k, c_star, slack = fewest(caps, live, need)
    if k == 0:
        return []
    cands = sorted(
        (d for d in range(fl.n_domains) if live[d] and caps[d] >= c_star - slack),
        key=lambda d: search_key(fl, caps, d),
    )
    change = [changed_levels(fl, cands[i - 1], cands[i]) for i in range(1, len(cands))]
    active = max(change, default=0)
    group_radix = [min(k, 1 + sum(m > level for m in change)) + 1 for level in range(active)]
    rest, values = _pack(fl, caps, cands, k, group_radix)
    inc = _openings(group_radix, rest)
    blocks = _blocks(fl, caps, cands, c_star, values)

    layers = [_grid(k, slack) for _ in range(active + 1)]
    layers[active][0][0] = 0  # nothing taken, every level closed
    for b, block in enumerate(blocks):
        m = block.levels
        block.merged = _grid(k, slack, m)
        if b and active:
            for t in range(k + 1):
                for c in range(slack + 1):
                    for lam in range(m - 1, -1, -1):
                        if layers[lam][t][c] < layers[m][t][c]:
                            layers[m][t][c] = layers[lam][t][c]
                            block.merged[t][c] = lam
            for lam in range(m):
                layers[lam] = _grid(k, slack)
        closed = _grid(k, slack)
        block.closed_from = _grid(k, slack, 0)
        for lam in range(active, 0, -1):
            for t in range(k + 1):
                for c in range(slack + 1):
                    v = layers[lam][t][c] + inc[lam]
                    if v < closed[t][c]:
                        closed[t][c] = v
                        block.closed_from[t][c] = lam
        for cls in block.classes:
            cls.shift = block.shift
            layers[0], cls.decided = _take_class(layers[0], closed, cls, k, slack)
            block.shift += len(cls.items) * cls.skip_cost
        for lam in range(1, active + 1):
            layers[lam] = [
                [row[c - block.shift] if c >= block.shift else INF for c in range(slack + 1)] for row in layers[lam]
            ]

    # Fewest groups, then the largest loss (least capacity), then the rest; ties to the more closed layer.
    ends = [(lam, c) for lam in range(active, -1, -1) for c in range(slack + 1) if layers[lam][k][c] < INF]
    lam, c = min(ends, key=lambda e: (layers[e[0]][k][e[1]] // rest, -e[1], layers[e[0]][k][e[1]] % rest))
    t = k
    chosen: list[int] = []
    for b in range(len(blocks) - 1, -1, -1):
        block = blocks[b]
        if lam >= 1:
            c -= block.shift
        for cls in reversed(block.classes):
            if lam != 0:
                break
            mm, from_closed = cls.decided[t][c]
            chosen.extend(cls.items[:mm])
            t -= mm
            c -= mm * cls.take_cost + (len(cls.items) - mm) * cls.skip_cost
            if from_closed:
                c -= cls.shift
                lam = block.closed_from[t][c]
        if b and active and lam == block.levels:
            lam = block.merged[t][c]
    return chosen


def _take_class(
    opened: Grid, closed: Grid, cls: _Class, k: int, slack: int
) -> tuple[Grid, list[list[tuple[int, bool]]]]:
    """The open layer after a class: take m of its n items (fewest first), from the open layer or a closed one."""
    n = len(cls.items)
    out = _grid(k, slack)
    decided = [[(0, False)] * (slack + 1) for _ in range(k + 1)]
    for t in range(k + 1):
        for c in range(slack + 1):
            c0 = c - n * cls.skip_cost
            best = opened[t][c0] if c0 >= 0 else INF
            choice = (0, False)
            for mm in range(1, min(n, t) + 1):
                cc = c - mm * cls.take_cost - (n - mm) * cls.skip_cost
                if cc < 0:
                    continue
                src, from_closed = opened[t - mm][cc], False
                if cc >= cls.shift and closed[t - mm][cc - cls.shift] <= src:
                    src, from_closed = closed[t - mm][cc - cls.shift], True
                if src + mm * cls.value < best:
                    best, choice = src + mm * cls.value, (mm, from_closed)
            out[t][c] = best
            decided[t][c] = choice
    return out, decided


def place(
    fl: FleetBitmap, caps: Sequence[int], chosen: Sequence[int], need: int, unit_gpus: int
) -> list[tuple[int, int]]:
    """(domain, units) in rank order; every domain full but one, which keeps the slack.

    The slack goes to the domain that keeps the most idle GPUs anyway (nodes
    too small for this pod shape), so it joins the largest hole instead of
    opening another; ties go to the last domain in rank order.
    """
    order = sorted(chosen, key=lambda d: rank_key(fl, d))
    spare = sum(caps[d] for d in order) - need
    keeps = [fl.domain_free[d] - caps[d] * unit_gpus for d in order]
    hole = max(range(len(order)), key=lambda i: (keeps[i], i))
    return [(d, caps[d] - (spare if i == hole else 0)) for i, d in enumerate(order)]


def choose_domains(
    fleet: FleetBitmap,
    caps: npt.ArrayLike,
    live: npt.ArrayLike,
    need: int,
    unit_gpus: int,
    out_domain: npt.NDArray[np.int32],
    out_units: npt.NDArray[np.int32],
) -> int:
    cap = [int(x) for x in np.asarray(caps).ravel()]
    ok = [bool(x) for x in np.asarray(live).ravel()]
    chosen = choose(fleet, cap, ok, need)
    if not chosen:
        return 0
    for i, (d, units) in enumerate(place(fleet, cap, chosen, need, unit_gpus)):
        out_domain[i] = d
        out_units[i] = units
    return len(chosen)
