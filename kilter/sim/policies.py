"""The placement policies ``kilter simulate`` can run, by the names users pass to ``--policy``.

Every baseline is set up as an operator who knows the product would set it
up for rack-scale NVLink (``--topology-request auto``, the default; each
policy's module cites the upstream source it follows):

- ``kilter``: kilter's planner with its split-wait rule.
- ``kueue-tas``: Kueue TAS as its docs recommend: required domain for a gang
  one domain holds, else preferred with required domain slices.
- ``kueue-tas-balanced``: ``kueue-tas`` with the ``TASBalancedPlacement``
  gate on (alpha, off by default in Kueue).
- ``kueue-tas-preferred``: Kueue TAS with every gang preferred at the domain
  level and no slices (the weakest setup, kept for comparison).
- ``kueue-tas-kilter-wait``: ``kueue-tas`` behind kilter's AdmissionCheck,
  whose split-wait rule may hold a preferred gang: placement and admission
  scored apart.
- ``volcano-hypernode``: Volcano's HyperNode hard mode at the tier that holds
  the gang, with HyperNode binpack.
- ``volcano-binpack``: Volcano's HyperNode binpack, every gang preferred.
- ``slurm``: Slurm's backfill scheduler over ``topology/block``: one base block
  per rack, one level per leaf, ``--segment`` (consolidated in one leaf) for
  gangs bigger than a rack.
- ``spread``, ``first-fit``: kube-scheduler's default spreading, and the
  first node with room; neither knows of domains.
"""

from __future__ import annotations

from collections.abc import Callable

from kilter.model.errors import InputError
from kilter.sim.kueue_tas import KueueTas
from kilter.sim.placement import PlacementPolicy
from kilter.sim.simple import FirstFit, KilterPlacement, Spread
from kilter.sim.slurm_block import SlurmBlock
from kilter.sim.volcano_binpack import VolcanoBinpack, VolcanoHyperNode

__all__ = ["POLICIES", "make_policy"]

POLICIES: dict[str, Callable[[int], PlacementPolicy]] = {
    "kilter": lambda seed: KilterPlacement(),
    "kueue-tas": lambda seed: KueueTas(),
    "kueue-tas-balanced": lambda seed: KueueTas(name="kueue-tas-balanced", balanced=True),
    "kueue-tas-kilter-wait": lambda seed: KueueTas(name="kueue-tas-kilter-wait", waits=True),
    "slurm": lambda seed: SlurmBlock(),
    "volcano-hypernode": lambda seed: VolcanoHyperNode(),
    "kueue-tas-preferred": lambda seed: KueueTas(name="kueue-tas-preferred", recommended=False),
    "volcano-binpack": lambda seed: VolcanoBinpack(),
    "spread": lambda seed: Spread(seed),
    "first-fit": lambda seed: FirstFit(),
}


def make_policy(name: str, *, seed: int = 0) -> PlacementPolicy:
    try:
        return POLICIES[name](seed)
    except KeyError:
        raise InputError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
