"""A run's settings and what it produces: ``SimConfig``, the price of a split, and the per-job outcome and timeline.

``engine`` runs with these; they live apart so that what a run is told and
what it reports read on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from kilter.sim.failure_model import FailureSettings
from kilter.sim.gangs import Gang, RequestMode
from kilter.sim.maintenance_spec import MaintenanceSettings
from kilter.sim.split_hold import WaitSettings
from kilter.topology.fleet import Fleet

__all__ = [
    "SPLIT_MODELS",
    "Outcome",
    "QuotaMode",
    "SimConfig",
    "SplitModel",
    "Timeline",
    "placed_slowdown",
    "slowdown_factor",
]

QuotaMode = Literal["kueue", "volcano"]
SplitModel = Literal["per-domain", "step", "none"]
SPLIT_MODELS: tuple[SplitModel, ...] = ("per-domain", "step", "none")


@dataclass(frozen=True)
class SimConfig:
    topology: RequestMode = "auto"
    fair: bool = False
    split_slowdown: float = 0.2
    block_slowdown: float = 0.1
    split_model: SplitModel = (
        "per-domain"  # how a split's price grows with its extra domains (``engine``'s module docstring)
    )
    # Kueue's cycles, or the Volcano verbs' bound-queue rules (volcano_engine; ``fair`` then selects Kueue's
    # fair-sharing preemption rules, which ``kilter serve``'s verbs run)
    quota: QuotaMode = "kueue"
    split_wait: WaitSettings = field(default_factory=WaitSettings)  # the rent-or-buy rule for kilter (split_hold)
    failures: FailureSettings | None = None  # node failures and how gangs recover (failing); None: nodes never fail
    maintenance: MaintenanceSettings | None = None  # a rollout over every domain (sim.maintenance); None: none


@dataclass
class Outcome:
    """Per job, in trace order: when it started and ended (NaN if never), and how it was placed."""

    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    run: npt.NDArray[np.float64]
    domains: npt.NDArray[np.int32]
    min_domains: npt.NDArray[np.int32]
    crossed_block: npt.NDArray[np.bool_]
    never: dict[int, str] = field(default_factory=dict)


@dataclass
class Timeline:
    """Time-weighted sums over the time jobs were present, and a sampled series for plots."""

    present_s: float = 0.0
    busy_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0  # what the busy GPUs would have needed unslowed: busy x duration / run time
    available_gpu_s: float = 0.0
    stranded_share_s: float = 0.0
    times: list[float] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)  # jobs queued and not started, per sample
    queue_used: list[list[int]] = field(default_factory=list)


def slowdown_factor(config: SimConfig, *, extra: int, crossed: bool) -> float:
    """How many times longer a gang runs with ``extra`` domains over its fewest, ``crossed`` a block it could have
    stayed under, under the run's split model (``engine``'s module docstring)."""
    if config.split_model == "none":
        return 1.0
    split = config.split_slowdown * (max(extra, 0) if config.split_model == "per-domain" else float(extra > 0))
    return 1.0 + split + (config.block_slowdown if crossed else 0.0)


def placed_slowdown(
    config: SimConfig, fleet: Fleet, blocks: Sequence[int], gang: Gang, nodes: npt.NDArray[np.int32]
) -> tuple[float, int, int, bool]:
    """How much longer the gang runs on ``nodes`` than unsplit (the factor), its domains, the fewest it could use,
    and whether it crosses a block it could have stayed under (``blocks``: per platform, the most domains one block
    holds; empty without blocks)."""
    doms = np.unique(fleet.node_domain[nodes])
    least = fleet.platforms[gang.platform].unsplit_domains(gang.pods)
    crossed = False
    if blocks and len(doms) > 1:
        groups = len(np.unique(fleet.domain_group[0, doms]))
        crossed = groups > -(-least // blocks[gang.platform])
    return slowdown_factor(config, extra=len(doms) - least, crossed=crossed), len(doms), least, crossed
