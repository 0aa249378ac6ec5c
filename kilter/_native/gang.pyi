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

def plan_gang(
    fleet: FleetBitmap,
    count: npt.NDArray[np.int32],
    gpus: npt.NDArray[np.int32],
    required: npt.NDArray[np.int32],
    preferred: npt.NDArray[np.int32],
    slice_size: npt.NDArray[np.int32],
    slice_level: npt.NDArray[np.int32],
    platform: int,
    node_ok: npt.NDArray[np.uint8] | None,
    out_node: npt.NDArray[np.int32],
    out_info: npt.NDArray[np.int32],
) -> int: ...
def score_nodes(
    fleet: FleetBitmap,
    nodes: npt.NDArray[np.int32],
    gpus: int,
    planned: npt.NDArray[np.int32],
    out: npt.NDArray[np.int8],
) -> None: ...
