"""Score candidate nodes for one pod on kube-scheduler's extender scale (0..10).

Names are resolved to indices and scored in the compiled core: a per-node
Python object here would cost more than the whole budget (reference
performance.md §6). The scoring rule is ``_native.gang.score_nodes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kilter._native import gang
from kilter.topology.fleet import Fleet

__all__ = ["MAX_SCORE", "score_pod"]

MAX_SCORE = int(gang.MAX_SCORE)


def score_pod(
    fleet: Fleet, names: list[str], gpus: int, planned: Sequence[int] = ()
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]:
    """Scores aligned with ``names`` (-1 unknown node, 0 does not fit) and the node indices found."""
    idx = np.empty(len(names), dtype=np.int32)
    gang.lookup_names(fleet.node_index, names, idx)
    plan = np.unique(np.asarray(planned, dtype=np.int32)) if len(planned) else np.empty(0, dtype=np.int32)
    out = np.empty(len(names), dtype=np.int8)
    gang.score_nodes(fleet.bitmap, idx, gpus, plan, out)
    return out, idx
