"""Reference twin of ``kilter._native.podsets``: the planner's steps, pod set by pod set."""

from __future__ import annotations

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


@dataclass(frozen=True)
class PodSetAsk:
    """One pod set as the planner reads it; ``offset`` is its first pod's place in the gang's nodes."""

    count: int
    gpus: int
    required: int
    preferred: int
    slice_size: int
    slice_level: int
    offset: int


@dataclass
class Shortfall:
    """Why a pod set failed: pods needed, and how many the best candidate offers."""

    need: int = 0
    offered: int = 0


@dataclass
class Scratch:
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


def _compute_caps(fl: FleetBitmap, sc: Scratch, gpus: int, unit: int, node_ok: npt.NDArray[np.uint8] | None) -> None:
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


def _sort_live(fl: FleetBitmap, sc: Scratch) -> None:
    sc.order = sorted((d for d in range(fl.n_domains) if sc.live[d]), key=lambda d: (-sc.caps[d], d))


def _live_total(fl: FleetBitmap, sc: Scratch) -> int:
    return sum(sc.caps[d] for d in range(fl.n_domains) if sc.live[d])


def _choose_group(fl: FleetBitmap, sc: Scratch, level: int, need: int) -> tuple[int, int]:
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


def _confine(fl: FleetBitmap, sc: Scratch, level: int, g: int) -> None:
    for d in range(fl.n_domains):
        if sc.live[d] and fl.group[level][d] != g:
            sc.live[d] = False
    _sort_live(fl, sc)


def _book(fl: FleetBitmap, sc: Scratch, node: int, gpus: int) -> bool:
    if fl.take(node, gpus) != 0:
        return False
    sc.undo.append((node, gpus))
    return True


def _rollback(fl: FleetBitmap, sc: Scratch, mark: int) -> None:
    while len(sc.undo) > mark:
        node, gpus = sc.undo.pop()
        fl.give(node, gpus)


def _fill_domain(
    fl: FleetBitmap, sc: Scratch, d: int, pods: int, gpus: int, node_ok: npt.NDArray[np.uint8] | None
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


def _domain_key(fl: FleetBitmap, sc: Scratch, d: int) -> tuple[int, bool, int, int]:
    return (sc.caps[d], fl.is_wholly_free(d), fl.domain_free[d], d)


def _plan_units(
    fl: FleetBitmap,
    sc: Scratch,
    gpus: int,
    n_units: int,
    unit: int,
    required: int,
    preferred: int,
    node_ok: npt.NDArray[np.uint8] | None,
    miss: Shortfall,
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
            miss.need, miss.offered = n_units * unit, best_sum // gpus
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
            miss.need, miss.offered = n_units * unit, best_sum * unit
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
            miss.need, miss.offered = n_units * unit, best_sum * unit
            return REQUIRED_TOO_SMALL, []
        _confine(fl, sc, level, g)
        limit = level

    total = _live_total(fl, sc)
    if total < need:
        miss.need, miss.offered = n_units * unit, total * unit
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
        miss.need, miss.offered = n_units * unit, total * unit
        return NO_CAPACITY, []
    return OK, placed


def _set_base(fl: FleetBitmap, sc: Scratch, platform: int, allow_detached: bool, only_gang: bool) -> None:
    for d in range(fl.n_domains):
        sc.base[d] = (
            (platform < 0 or fl.platform[d] == platform)
            and (allow_detached or not (fl.flags[d] & DETACHED))
            and (not only_gang or sc.in_gang[d])
        )


def _plan_pod_set(
    fl: FleetBitmap,
    sc: Scratch,
    ps: PodSetAsk,
    platform: int,
    allow_detached: bool,
    only_gang: bool,
    node_ok: npt.NDArray[np.uint8] | None,
    miss: Shortfall,
) -> tuple[int, list[int]]:
    count, gpus, required, preferred = ps.count, ps.gpus, ps.required, ps.preferred
    slice_size, slice_level = ps.slice_size, ps.slice_level
    mark = len(sc.undo)
    _set_base(fl, sc, platform, allow_detached, only_gang)

    if slice_size <= 1 or slice_level == NONE or (required >= 0 and slice_level >= required):
        _compute_caps(fl, sc, gpus, 1, node_ok)
        return _plan_units(fl, sc, gpus, count, 1, required, preferred, node_ok, miss)

    n_slices = count // slice_size
    if slice_level == NODE:
        _compute_caps(fl, sc, gpus * slice_size, 1, node_ok)
        status, units = _plan_units(fl, sc, gpus * slice_size, n_slices, 1, required, preferred, node_ok, miss)
        if status != OK:
            miss.need, miss.offered = count, miss.offered * slice_size
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
        status, out = _plan_units(fl, sc, gpus, n_slices, slice_size, required, preferred, node_ok, miss)
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
            miss.need, miss.offered = count, best_sum
            return REQUIRED_TOO_SMALL, []
        for d in range(fl.n_domains):
            if sc.base[d] and fl.group[required - UP][d] != g:
                sc.base[d] = False
    out = []
    for s in range(n_slices):
        _compute_caps(fl, sc, gpus, 1, node_ok)
        status, pods = _plan_units(fl, sc, gpus, slice_size, 1, slice_level, NONE, node_ok, miss)
        if status != OK:
            _rollback(fl, sc, mark)
            miss.need, miss.offered = count, s * slice_size
            return SLICES_DO_NOT_FIT, []
        out.extend(pods)
    return OK, _order_slices(fl, out, slice_size)


def _order_slices(fl: FleetBitmap, out: list[int], size: int) -> list[int]:
    rank = {d: i for i, d in enumerate(sorted(range(fl.n_domains), key=lambda d: domainset.rank_key(fl, d)))}
    slices = [out[s : s + size] for s in range(0, len(out), size)]
    slices.sort(key=lambda pods: rank[fl.node_domain[pods[0]]])
    return [node for pods in slices for node in pods]


def run_plan(
    fl: FleetBitmap,
    sc: Scratch,
    sets: list[PodSetAsk],
    set_order: list[int],
    platform: int,
    allow_detached: bool,
    node_ok: npt.NDArray[np.uint8] | None,
    out: list[int],
    miss: Shortfall,
) -> tuple[int, int]:
    """Plan the pod sets in ``set_order``; (status, failing pod set or -1). Every booking is undone."""
    status, failed = OK, -1
    any_gang = False
    for k in set_order:
        ps = sets[k]
        status = -1
        pods: list[int] = []
        if any_gang:
            mark = len(sc.undo)
            status, pods = _plan_pod_set(fl, sc, ps, platform, allow_detached, True, node_ok, miss)
            if status != OK:
                _rollback(fl, sc, mark)
        if status != OK:
            status, pods = _plan_pod_set(fl, sc, ps, platform, allow_detached, False, node_ok, miss)
        if status != OK:
            failed = k
            break
        out[ps.offset : ps.offset + ps.count] = pods
        for node in pods:
            sc.in_gang[fl.node_domain[node]] = True
        any_gang = True
    _rollback(fl, sc, 0)
    return status, failed
