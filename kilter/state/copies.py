"""Two copies of one object in one list (two Nodes ``r1-t00`` in a snapshot): which one the store keeps, and why.

The API server never lists an object twice, but a snapshot file made by hand
or by joining two ``kubectl get`` outputs can. Keeping whichever came last
would make kilter's answers depend on the order of the file, so the choice
depends only on the two copies.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from kilter.model.core_v1 import Node, Pod
from kilter.state.events import Stored

__all__ = ["kept_copy", "newer", "resource_version"]


def resource_version(obj: Stored) -> str:
    """The object's ``metadata.resourceVersion`` ("" when it has none)."""
    if isinstance(obj, Node | Pod):
        return obj.metadata.resource_version or ""
    meta = obj.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return version if isinstance(version, str) else ""


def newer(a: Stored, b: Stored) -> Stored:
    """Of two copies of one object, the one to keep, whichever came first.

    The higher resourceVersion where both are numbers (the API server's are
    etcd revisions: the later write); else the copy whose JSON with sorted
    keys sorts first — arbitrary, but the same for every order of the file.
    """
    va, vb = resource_version(a), resource_version(b)
    if va.isdigit() and vb.isdigit() and int(va) != int(vb):
        return a if int(va) > int(vb) else b
    return a if msgspec.json.encode(a, order="sorted") <= msgspec.json.encode(b, order="sorted") else b


def kept_copy(kept: Stored, other: Stored) -> str:
    """Which copy ``newer`` kept, in words for ``/readyz``."""
    version = resource_version(kept)
    by_version = version.isdigit() and version != resource_version(other)
    return f"the copy of resourceVersion {version[:32]}" if by_version else "the copy first by content"
