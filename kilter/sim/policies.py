"""The placement policies ``kilter simulate`` can run, by the names users pass to ``--policy``."""

from __future__ import annotations

from collections.abc import Callable

from kilter.model.errors import InputError
from kilter.sim.kueue_tas import KueueTas
from kilter.sim.placement import Policy
from kilter.sim.simple import FirstFit, KilterPlacement, Spread
from kilter.sim.volcano_binpack import VolcanoBinpack

__all__ = ["POLICIES", "make_policy"]

POLICIES: dict[str, Callable[[int], Policy]] = {
    "kilter": lambda seed: KilterPlacement(),
    "kueue-tas": lambda seed: KueueTas(),
    "volcano-binpack": lambda seed: VolcanoBinpack(),
    "spread": lambda seed: Spread(seed),
    "first-fit": lambda seed: FirstFit(),
}


def make_policy(name: str, *, seed: int = 0) -> Policy:
    try:
        return POLICIES[name](seed)
    except KeyError:
        raise InputError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
