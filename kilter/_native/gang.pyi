from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from kilter._native.domains import FleetBitmap

OK: int
NO_CAPACITY: int
REQUIRED_TOO_SMALL: int
SLICES_DO_NOT_FIT: int
NONE: int
NODE: int
DOMAIN: int
UP: int
MAX_SCORE: int

class PodSets:
    @property
    def n_sets(self) -> int: ...
    @property
    def total(self) -> int: ...
    def __init__(self, rows: Iterable[tuple[int, int, int, int, int, int]]) -> None: ...
    def __len__(self) -> int: ...

class PlanResult:
    @property
    def status(self) -> int: ...
    @property
    def nodes(self) -> npt.NDArray[np.int32]: ...
    @property
    def need(self) -> int: ...
    @property
    def offered(self) -> int: ...
    @property
    def pod_set(self) -> int: ...
    @property
    def level(self) -> int: ...
    @property
    def ok(self) -> bool: ...

def plan_gang(
    fleet: FleetBitmap,
    pod_sets: PodSets,
    platform: int = -1,
    node_ok: npt.NDArray[np.uint8] | None = None,
) -> PlanResult: ...
def score_nodes(
    fleet: FleetBitmap,
    nodes: npt.NDArray[np.int32],
    gpus: int,
    planned: npt.NDArray[np.int32],
    out: npt.NDArray[np.int8],
) -> None: ...
