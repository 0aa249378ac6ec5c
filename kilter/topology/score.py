"""Score candidate nodes for one pod on kube-scheduler's extender scale (0..10).

Names are resolved to indices and scored in the compiled core: a per-node
Python object here would cost more than the whole budget (measured in
``bench/extender.py``). The scoring rule is ``_native.gang.score_nodes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from kilter._native import gang
from kilter.model.errors import InputError
from kilter.topology.fleet import Fleet

__all__ = ["MAX_SCORE", "score_indices", "score_pod", "score_pod_json"]

MAX_SCORE = int(gang.MAX_SCORE)


def score_pod(
    fleet: Fleet, names: list[str], *, gpus: int, planned: Sequence[int] = ()
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]:
    """Scores aligned with ``names`` (-1 unknown node, 0 does not fit) and the node indices found."""
    idx = np.empty(len(names), dtype=np.int32)
    fleet.name_index.lookup(names, idx)
    return score_indices(fleet, idx, gpus=gpus, planned=planned), idx


def score_pod_json(
    fleet: Fleet, names_json: bytes, *, gpus: int, planned: Sequence[int] = ()
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32]]:
    """Like ``score_pod`` for names given as the raw bytes of a JSON array (the extender's ``NodeNames``)."""
    try:
        found = fleet.name_index.lookup_json(names_json)
    except ValueError as exc:
        raise InputError(f"NodeNames: {exc}") from None
    if found is None:
        try:
            decoded = msgspec.json.decode(names_json, type=list[str])
        except msgspec.DecodeError as exc:
            raise InputError(f"NodeNames: {exc}") from None
        return score_pod(fleet, decoded, gpus=gpus, planned=planned)
    idx = found[0]
    return score_indices(fleet, idx, gpus=gpus, planned=planned), idx


def score_indices(
    fleet: Fleet, idx: npt.NDArray[np.int32], *, gpus: int, planned: Sequence[int] = ()
) -> npt.NDArray[np.int8]:
    """Like ``score_pod`` for node indices already looked up (-1 for a node kilter does not know)."""
    plan = np.unique(np.asarray(planned, dtype=np.int32)) if len(planned) else np.empty(0, dtype=np.int32)
    out = np.empty(len(idx), dtype=np.int8)
    gang.score_nodes(fleet.bitmap, idx, gpus, plan, out)
    return out
