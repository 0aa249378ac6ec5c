"""The global capacity pool: regional kilter instances exchanging capacity inventories peer to peer (issue #22).

``inventory`` is what one region tells the others (its rooms per scale-up
domain, its quota headroom) and ``publish`` makes it from the state,
``peers`` how the regions keep the latest of each other's without a leader:
the newest generation of each origin wins, relayed hop by hop, and an
inventory past its time to live is not used. ``exchange`` carries it over
gRPC (``wire`` checks what arrives), ``dispatch`` nominates MultiKueue
worker clusters from it, ``settings`` is the Configuration's ``pool``.
"""

from __future__ import annotations

import importlib
import types

__all__ = [
    "authorship",
    "backoff",
    "bounds",
    "dispatch",
    "exchange",
    "identity",
    "inventory",
    "peers",
    "publish",
    "settings",
    "wire",
]


def __getattr__(name: str) -> types.ModuleType:
    """Submodules on first use: the Configuration reads ``settings`` without the gRPC stack ``exchange`` needs."""
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
