"""Reference twin of ``kilter._native.gang``: the same planner and scorer in plain Python."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter._native.twin import domainset
from kilter._native.twin.domains import DETACHED, FleetBitmap

OK = 0
NO_CAPACITY = 1
REQUIRED_TOO_SMALL = 2
SLICES_DO_NOT_FIT = 3
NONE = -1
NODE = 0
DOMAIN = 1
UP = 2
MAX_SCORE = 10


@dataclass
class _Scratch:
    n: int
    cap_width: int
    choose: domainset.Chooser = domainset.choose
    caps: list[int] = field(default_factory=list)
    base: list[bool] = field(default_factory=list)
    live: list[bool] = field(default_factory=list)
    in_gang: list[bool] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    undo: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.caps = [0] * self.n
        self.base = [False] * self.n
        self.live = [False] * self.n
        self.in_gang = [False] * self.n


def _fits(fl: FleetBitmap, node: int, node_ok: npt.NDArray[np.uint8] | None) -> bool:
    return bool(fl.node_usable[node]) and (node_ok is None or bool(node_ok[node]))


def _compute_caps(fl: FleetBitmap, sc: _Scratch, gpus: int, unit: int, node_ok: npt.NDArray[np.uint8] | None) -> None:
    for d in range(fl.n_domains):
        c = 0
        if sc.base[d]:
            if node_ok is None:
                c = sum(fl.hist[d][k] * (k // gpus) for k in range(gpus, fl.max_gpus + 1))
            else:
                c = sum(
                    fl.node_free(n) // gpus
                    for n in range(fl.node_start[d], fl.node_start[d + 1])
                    if _fits(fl, n, node_ok)
                )
            c //= unit
        sc.caps[d] = c
        sc.live[d] = c > 0


def _sort_live(fl: FleetBitmap, sc: _Scratch) -> None:
    sc.order = sorted((d for d in range(fl.n_domains) if sc.live[d]), key=lambda d: (-sc.caps[d], d))


def _live_total(fl: FleetBitmap, sc: _Scratch) -> int:
    return sum(sc.caps[d] for d in range(fl.n_domains) if sc.live[d])


def _choose_group(fl: FleetBitmap, sc: _Scratch, level: int, need: int) -> tuple[int, int]:
    n = fl.n_groups[level]
    gsum = [0] * n
    gtotal = [0] * n
    gcnt = [0] * n
    gk = [0] * n
    for d in sc.order:
        g = fl.group[level][d]
        if g < 0:
            continue
        gtotal[g] += sc.caps[d]
        if gsum[g] < need:
            gsum[g] += sc.caps[d]
            gcnt[g] += 1
            if gsum[g] >= need:
                gk[g] = gcnt[g]
    best_sum = max(gtotal, default=0)
    candidates = [g for g in range(n) if gk[g]]
    if not candidates:
        return -1, best_sum
    return min(candidates, key=lambda g: (gk[g], gtotal[g], g)), best_sum


def _confine(fl: FleetBitmap, sc: _Scratch, level: int, g: int) -> None:
    for d in range(fl.n_domains):
        if sc.live[d] and fl.group[level][d] != g:
            sc.live[d] = False
    _sort_live(fl, sc)


def _book(fl: FleetBitmap, sc: _Scratch, node: int, gpus: int) -> bool:
    if fl.take(node, gpus) != 0:
        return False
    sc.undo.append((node, gpus))
    return True


def _rollback(fl: FleetBitmap, sc: _Scratch, mark: int) -> None:
    while len(sc.undo) > mark:
        node, gpus = sc.undo.pop()
        fl.give(node, gpus)


def _fill_domain(
    fl: FleetBitmap, sc: _Scratch, d: int, pods: int, gpus: int, node_ok: npt.NDArray[np.uint8] | None
) -> list[int] | None:
    placed: list[int] = []
    for _ in range(pods):
        fitting = [
            (fl.node_free(n), n)
            for n in range(fl.node_start[d], fl.node_start[d + 1])
            if _fits(fl, n, node_ok) and fl.node_free(n) >= gpus
        ]
        if not fitting:
            return None
        _, best = min(fitting)
        if not _book(fl, sc, best, gpus):
            return None
        placed.append(best)
    return sorted(placed)


def _domain_key(fl: FleetBitmap, sc: _Scratch, d: int) -> tuple[int, bool, int, int]:
    return (sc.caps[d], fl.is_wholly_free(d), fl.domain_free[d], d)


def _plan_units(
    fl: FleetBitmap,
    sc: _Scratch,
    gpus: int,
    n_units: int,
    unit: int,
    required: int,
    preferred: int,
    node_ok: npt.NDArray[np.uint8] | None,
    info: list[int],
) -> tuple[int, list[int]]:
    mark = len(sc.undo)
    need = n_units

    if required == NODE:
        need_gpus = n_units * unit * gpus
        best, best_f, best_sum = -1, 0, 0
        for d in range(fl.n_domains):
            if not sc.base[d]:
                continue
            for node in range(fl.node_start[d], fl.node_start[d + 1]):
                if not _fits(fl, node, node_ok):
                    continue
                f = fl.node_free(node)
                best_sum = max(best_sum, f)
                if f >= need_gpus and (best < 0 or f < best_f):
                    best, best_f = node, f
        if best < 0:
            info[0], info[1] = n_units * unit, best_sum // gpus
            return REQUIRED_TOO_SMALL, []
        out = []
        for _ in range(n_units * unit):
            if not _book(fl, sc, best, gpus):
                _rollback(fl, sc, mark)
                return NO_CAPACITY, []
            out.append(best)
        return OK, out

    if required == DOMAIN:
        live = [d for d in range(fl.n_domains) if sc.live[d]]
        best_sum = max((sc.caps[d] for d in live), default=0)
        fitting = [d for d in live if sc.caps[d] >= need]
        if not fitting:
            info[0], info[1] = n_units * unit, best_sum * unit
            return REQUIRED_TOO_SMALL, []
        best = min(fitting, key=lambda x: _domain_key(fl, sc, x))
        pods = _fill_domain(fl, sc, best, n_units * unit, gpus, node_ok)
        if pods is None:
            _rollback(fl, sc, mark)
            return NO_CAPACITY, []
        return OK, pods

    _sort_live(fl, sc)
    limit = fl.n_levels
    if required >= UP:
        level = required - UP
        g, best_sum = _choose_group(fl, sc, level, need)
        if g < 0:
            info[0], info[1] = n_units * unit, best_sum * unit
            return REQUIRED_TOO_SMALL, []
        _confine(fl, sc, level, g)
        limit = level

    total = _live_total(fl, sc)
    if total < need:
        info[0], info[1] = n_units * unit, total * unit
        return NO_CAPACITY, []

    if preferred >= UP and preferred - UP < limit:
        level = preferred - UP
        g, _ = _choose_group(fl, sc, level, need)
        if g >= 0:
            _confine(fl, sc, level, g)

    chosen = sc.choose(fl, sc.caps, sc.live, need)
    placed: list[int] = []
    for d, units in domainset.place(fl, sc.caps, chosen, need, unit * gpus) if chosen else []:
        pods = _fill_domain(fl, sc, d, units * unit, gpus, node_ok)
        if pods is None:
            chosen = []
            break
        placed.extend(pods)
    if not chosen:
        _rollback(fl, sc, mark)
        info[0], info[1] = n_units * unit, total * unit
        return NO_CAPACITY, []
    return OK, placed


def _set_base(fl: FleetBitmap, sc: _Scratch, platform: int, allow_detached: bool, only_gang: bool) -> None:
    for d in range(fl.n_domains):
        sc.base[d] = (
            (platform < 0 or fl.platform[d] == platform)
            and (allow_detached or not (fl.flags[d] & DETACHED))
            and (not only_gang or sc.in_gang[d])
        )


def _plan_pod_set(
    fl: FleetBitmap,
    sc: _Scratch,
    count: int,
    gpus: int,
    required: int,
    preferred: int,
    slice_size: int,
    slice_level: int,
    platform: int,
    allow_detached: bool,
    only_gang: bool,
    node_ok: npt.NDArray[np.uint8] | None,
    info: list[int],
) -> tuple[int, list[int]]:
    mark = len(sc.undo)
    _set_base(fl, sc, platform, allow_detached, only_gang)

    if slice_size <= 1 or slice_level == NONE or (required >= 0 and slice_level >= required):
        _compute_caps(fl, sc, gpus, 1, node_ok)
        return _plan_units(fl, sc, gpus, count, 1, required, preferred, node_ok, info)

    n_slices = count // slice_size
    if slice_level == NODE:
        _compute_caps(fl, sc, gpus * slice_size, 1, node_ok)
        status, units = _plan_units(fl, sc, gpus * slice_size, n_slices, 1, required, preferred, node_ok, info)
        if status != OK:
            info[0], info[1] = count, info[1] * slice_size
            return status, []
        _rollback(fl, sc, mark)
        out = [node for node in units for _ in range(slice_size)]
        for node in out:
            if not _book(fl, sc, node, gpus):
                _rollback(fl, sc, mark)
                return NO_CAPACITY, []
        return OK, out

    if slice_level == DOMAIN:
        _compute_caps(fl, sc, gpus, slice_size, node_ok)
        status, out = _plan_units(fl, sc, gpus, n_slices, slice_size, required, preferred, node_ok, info)
        if status == NO_CAPACITY:
            _compute_caps(fl, sc, gpus, 1, node_ok)
            if _live_total(fl, sc) >= count:
                return SLICES_DO_NOT_FIT, []
        return status, out

    if required >= UP:
        _compute_caps(fl, sc, gpus, 1, node_ok)
        _sort_live(fl, sc)
        g, best_sum = _choose_group(fl, sc, required - UP, count)
        if g < 0:
            info[0], info[1] = count, best_sum
            return REQUIRED_TOO_SMALL, []
        for d in range(fl.n_domains):
            if sc.base[d] and fl.group[required - UP][d] != g:
                sc.base[d] = False
    out = []
    for s in range(n_slices):
        _compute_caps(fl, sc, gpus, 1, node_ok)
        status, pods = _plan_units(fl, sc, gpus, slice_size, 1, slice_level, NONE, node_ok, info)
        if status != OK:
            _rollback(fl, sc, mark)
            info[0], info[1] = count, s * slice_size
            return SLICES_DO_NOT_FIT, []
        out.extend(pods)
    return OK, _order_slices(fl, out, slice_size)


def _order_slices(fl: FleetBitmap, out: list[int], size: int) -> list[int]:
    rank = {d: i for i, d in enumerate(sorted(range(fl.n_domains), key=lambda d: domainset.rank_key(fl, d)))}
    slices = [out[s : s + size] for s in range(0, len(out), size)]
    slices.sort(key=lambda pods: rank[fl.node_domain[pods[0]]])
    return [node for pods in slices for node in pods]


def plan_gang(
    fleet: FleetBitmap,
    count: npt.ArrayLike,
    gpus: npt.ArrayLike,
    required: npt.ArrayLike,
    preferred: npt.ArrayLike,
    slice_size: npt.ArrayLike,
    slice_level: npt.ArrayLike,
    platform: int,
    node_ok: npt.NDArray[np.uint8] | None,
    out_node: npt.NDArray[np.int32],
    out_info: npt.NDArray[np.int32],
) -> int:
    args = (count, gpus, required, preferred, slice_size, slice_level, platform, node_ok, out_node, out_info)
    return plan_gang_with(domainset.choose, fleet, *args)


def plan_gang_with(
    choose: domainset.Chooser,
    fleet: FleetBitmap,
    count: npt.ArrayLike,
    gpus: npt.ArrayLike,
    required: npt.ArrayLike,
    preferred: npt.ArrayLike,
    slice_size: npt.ArrayLike,
    slice_level: npt.ArrayLike,
    platform: int,
    node_ok: npt.NDArray[np.uint8] | None,
    out_node: npt.NDArray[np.int32],
    out_info: npt.NDArray[np.int32],
) -> int:
    """plan_gang with another chooser of each pod set's domain set (tests pass a brute force)."""
    counts = [int(x) for x in np.asarray(count).ravel()]
    gpu = [int(x) for x in np.asarray(gpus).ravel()]
    req = [int(x) for x in np.asarray(required).ravel()]
    pref = [int(x) for x in np.asarray(preferred).ravel()]
    ssize = [int(x) for x in np.asarray(slice_size).ravel()]
    slevel = [int(x) for x in np.asarray(slice_level).ravel()]
    n_sets = len(counts)
    for i in range(n_sets):
        if counts[i] <= 0 or gpu[i] <= 0:
            raise ValueError(f"pod set {i}: count and gpus must be >= 1")
        for lv in (req[i], pref[i], slevel[i]):
            if lv < -1 or lv >= UP + fleet.n_levels:
                raise ValueError(f"pod set {i}: level {lv} out of range")
        if ssize[i] <= 0 or counts[i] % ssize[i] != 0:
            raise ValueError(f"pod set {i}: slice size must divide count")
    total = sum(counts)
    if len(out_node) != total:
        raise ValueError(f"out_node needs {total} entries")
    offsets = [sum(counts[:i]) for i in range(n_sets)]
    set_order = sorted(range(n_sets), key=lambda i: -(counts[i] * gpu[i]))
    out_info[:4] = [0, 0, -1, -1]
    out_node[:] = -1
    sc = _Scratch(n=fleet.n_domains, cap_width=fleet.n_words * 64, choose=choose)
    info = [0, 0]
    status = OK
    any_gang = False
    for ps in set_order:
        args = (counts[ps], gpu[ps], req[ps], pref[ps], ssize[ps], slevel[ps], platform, total == 1)
        status = -1
        pods: list[int] = []
        if any_gang:
            mark = len(sc.undo)
            status, pods = _plan_pod_set(fleet, sc, *args, True, node_ok, info)
            if status != OK:
                _rollback(fleet, sc, mark)
        if status != OK:
            status, pods = _plan_pod_set(fleet, sc, *args, False, node_ok, info)
        if status != OK:
            out_info[:4] = [info[0], info[1], ps, req[ps] if req[ps] >= 0 else slevel[ps]]
            break
        out_node[offsets[ps] : offsets[ps] + counts[ps]] = pods
        for node in pods:
            sc.in_gang[fleet.node_domain[node]] = True
            any_gang = True
    _rollback(fleet, sc, 0)
    if status != OK:
        out_node[:] = -1
    return status


def score_nodes(
    fleet: FleetBitmap,
    nodes: npt.ArrayLike,
    gpus: int,
    planned: npt.ArrayLike,
    out: npt.NDArray[np.int8],
) -> None:
    plan = [int(x) for x in np.asarray(planned).ravel()]
    if plan != sorted(plan):
        raise ValueError("planned must be sorted ascending")
    for i, raw in enumerate(np.asarray(nodes).ravel()):
        n = int(raw)
        if n < 0 or n >= fleet.n_nodes:
            out[i] = -1
            continue
        f = fleet.node_free(n)
        if not fleet.node_usable[n] or f < gpus:
            out[i] = 0
            continue
        j = bisect_left(plan, n)
        if j < len(plan) and plan[j] == n:
            out[i] = MAX_SCORE
            continue
        d = fleet.node_domain[n]
        if fleet.flags[d] & DETACHED:
            out[i] = 1
            continue
        single = fleet.node_start[d + 1] - fleet.node_start[d] == 1
        if single and fleet.n_levels > 0 and fleet.group[0][d] >= 0:
            g = fleet.group[0][d]
            tot = fleet.group_usable[0][g]
            used = tot - fleet.group_free[0][g]
        else:
            tot = fleet.domain_usable[d]
            used = tot - fleet.domain_free[d]
        s = 1 + (6 * used) // tot
        s += fleet.node_used[n] > 0
        s += not fleet.is_wholly_free(d)
        out[i] = s
