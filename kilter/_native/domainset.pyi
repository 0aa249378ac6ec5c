import numpy as np
import numpy.typing as npt

from kilter._native.domains import FleetBitmap

def choose_domains(
    fleet: FleetBitmap,
    caps: npt.NDArray[np.int32],
    live: npt.NDArray[np.uint8],
    need: int,
    unit_gpus: int,
    out_domain: npt.NDArray[np.int32],
    out_units: npt.NDArray[np.int32],
) -> int: ...
