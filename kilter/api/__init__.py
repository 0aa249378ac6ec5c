"""The gRPC placement API (``kilter.v1.Placement``): Plan, Explain, Inventory and WatchDecisions.

``placement.proto`` is the contract; its stubs (``placement_pb2``,
``placement_pb2_grpc`` and their ``.pyi``) are generated at build time
(``make``), never committed. ``pool.proto`` is the regions' inventory
exchange (``kilter.v1.Pool``), served on the same listener by
``kilter.pool``, which owns its meaning. ``servicer`` answers the calls from ``gangs``
and ``state``, ``messages`` maps values to messages, ``server`` runs the
listener with health and reflection, ``tls`` its reloading credentials,
``last_resort`` answers what no handler foresaw.
"""

from kilter.api import (
    last_resort,
    messages,
    placement_pb2,
    placement_pb2_grpc,
    pool_pb2,
    pool_pb2_grpc,
    server,
    servicer,
    tls,
)
from kilter.api.server import PlacementServer
from kilter.api.servicer import PlacementServicer, Sources
from kilter.api.tls import ReloadingCredentials

__all__ = [
    "PlacementServer",
    "PlacementServicer",
    "ReloadingCredentials",
    "Sources",
    "last_resort",
    "messages",
    "placement_pb2",
    "placement_pb2_grpc",
    "pool_pb2",
    "pool_pb2_grpc",
    "server",
    "servicer",
    "tls",
]
