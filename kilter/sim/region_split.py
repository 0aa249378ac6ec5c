"""Which regions a ``kilter simulate --regions`` run has, and which region each job of the trace calls home.

The spec is one flag's value, a comma-separated list an ML-platform engineer
can read aloud:

- ``3``: three regions ``r1``, ``r2``, ``r3``, each a copy of ``--fleet``;
- ``eu,us,ap``: three named regions, each a copy of ``--fleet``;
- ``eu=eu.yaml,us=us.yaml``: each region with its own fleet file (any form
  ``--fleet`` takes); a bare name still means a copy of ``--fleet``;
- two optional settings anywhere in the list: ``split=tenant`` (default) or
  ``split=arrival``, and ``delay=30s`` (default; a duration as annotations
  write it: ``45s``, ``2m``, ``1m30s``).

A *home* is the region whose users submitted the job; a job that starts
elsewhere pays ``delay`` (``regions``). ``split=tenant`` keeps a tenant's
jobs in one region, as a team works in one: tenants, the busiest first
(GPU-seconds asked), each go to the region whose GPUs are the least asked
for so far, counted per GPU of the region's capacity. That uses the trace's
durations, as a platform team places teams from their history; no
dispatcher ever sees them. ``split=arrival`` deals jobs out in submission
order, each to the region with the fewest jobs per GPU of capacity so far
(round robin when regions are equal), as a global load balancer would. Ties
go to the region listed first, so the split is the same on every run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.sim.trace import TraceJob

__all__ = [
    "DEFAULT_DELAY_S",
    "MAX_REGIONS",
    "SPLITS",
    "RegionSpec",
    "Split",
    "assign_homes",
    "parse_regions",
]

Split = Literal["tenant", "arrival"]
SPLITS: tuple[Split, ...] = ("tenant", "arrival")
DEFAULT_DELAY_S = 30.0
MAX_REGIONS = 20
"""MultiKueue nominates at most 20 worker clusters (Kueue v0.16+), so more regions would not be one pool."""

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS label, as a MultiKueueCluster name is
_OPTIONS = ("split", "delay")


@dataclass(frozen=True)
class RegionSpec:
    """The regions in the order given, each region's fleet file ("" for ``--fleet``), the split, the delay (s)."""

    names: tuple[str, ...]
    fleets: tuple[str, ...]
    split: Split = "tenant"
    delay_s: float = DEFAULT_DELAY_S


def parse_regions(text: str) -> RegionSpec:
    """The spec of a ``--regions`` value (module docstring); every mistake is an InputError naming the item."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InputError(f"--regions: expected a count or names separated by commas, got {text!r}")
    split: Split = "tenant"
    delay_s = DEFAULT_DELAY_S
    names: list[str] = []
    fleets: list[str] = []
    for item in items:
        key, has_value, value = (part.strip() for part in item.partition("="))
        if key in _OPTIONS:
            if key == "split":
                if value not in SPLITS:
                    raise InputError(f"--regions: split must be one of {', '.join(SPLITS)}, got {value!r}")
                split = "arrival" if value == "arrival" else "tenant"
            else:
                delay_s = parse_duration(value, path="--regions delay")
            continue
        if key.isdigit() and not has_value:
            if len(items) - _count_options(items) != 1:
                raise InputError(f"--regions: a count ({key}) stands for every region; name them instead")
            count = int(key)
            if not 1 <= count <= MAX_REGIONS:
                raise InputError(f"--regions: between 1 and {MAX_REGIONS} regions, got {count}")
            names += [f"r{i}" for i in range(1, count + 1)]
            fleets += [""] * count
            continue
        if not _NAME.fullmatch(key):
            raise InputError(f"--regions: region name {key!r} must be lowercase letters, digits and '-' (a DNS label)")
        if has_value and not value:
            raise InputError(f"--regions: region {key}= needs a fleet file after '='")
        names.append(key)
        fleets.append(value)
    if not names:
        raise InputError("--regions: name at least one region (or give a count)")
    if len(names) > MAX_REGIONS:
        raise InputError(f"--regions: at most {MAX_REGIONS} regions, got {len(names)}")
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise InputError(f"--regions: region {doubled[0]!r} is named twice")
    return RegionSpec(tuple(names), tuple(fleets), split, delay_s)


def _count_options(items: Sequence[str]) -> int:
    return sum(item.partition("=")[0].strip() in _OPTIONS for item in items)


def assign_homes(jobs: Sequence[TraceJob], capacity_gpus: Sequence[int], split: Split) -> list[int]:
    """Each job's home region, as an index into ``capacity_gpus`` (each region's usable GPUs), by ``split``."""
    if not capacity_gpus or min(capacity_gpus) <= 0:
        raise InputError("every region needs usable GPUs")
    n = len(capacity_gpus)
    if split == "arrival":
        dealt = [0] * n
        homes = []
        for _ in jobs:
            r = min(range(n), key=lambda i: ((dealt[i] + 1) / capacity_gpus[i], i))
            dealt[r] += 1
            homes.append(r)
        return homes
    asked: dict[str, float] = {}
    for job in jobs:
        asked[job.queue] = asked.get(job.queue, 0.0) + job.gpus * job.duration_s
    load = [0.0] * n
    home_of: dict[str, int] = {}
    for tenant in sorted(asked, key=lambda t: (-asked[t], t)):
        r = min(range(n), key=lambda i: (load[i] / capacity_gpus[i], i))
        load[r] += asked[tenant]
        home_of[tenant] = r
    return [home_of[job.queue] for job in jobs]
