"""The cluster-state cache: one store, fed by a snapshot file or by list/watch reflectors, and the fleet.

Modules are imported on first use: a command that reads one snapshot needs
``cluster`` and the snapshot readers, not the live feed's reflectors and
HTTP client.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from kilter.state.cluster import ClusterState, from_objects, load
    from kilter.state.store import ClusterStore, Event

__all__ = [
    "ClusterState",
    "ClusterStore",
    "Event",
    "cluster",
    "copies",
    "events",
    "feed",
    "from_objects",
    "live",
    "load",
    "pod_index",
    "reflector",
    "reservations",
    "snapshot",
    "snapshot_file",
    "snapshot_json",
    "store",
    "watchers",
    "whole_nodes",
]

_NAMES = {
    "ClusterState": "cluster",
    "from_objects": "cluster",
    "load": "cluster",
    "ClusterStore": "store",
    "Event": "store",
}


def __getattr__(name: str) -> typing.Any:
    if name in _NAMES:
        value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
        return value
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
