"""The filter verb's node lists: the candidates read from the body, and the ExtenderFilterResult written back.

kube-scheduler sends either node names (``nodeCacheCapable: true``) or its
full Node objects; ``Candidates`` holds both as fleet indices (-1 for a node
kilter does not know) plus, where they had to be decoded, the names as sent.
The answer is written from those indices: the passing nodes (names, or the
scheduler's own Node objects verbatim), and one reason per distinct verdict
rather than one sentence per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.extenders import wire
from kilter.model.core_v1 import MAX_NAME
from kilter.topology import verdicts
from kilter.topology.fleet import Fleet

__all__ = ["Candidates", "all_unknown", "fast_name", "filter_body", "group", "pass_through"]


@dataclass
class Candidates:
    index: npt.NDArray[np.int32]  # fleet index per node, in request order; -1: a node kilter does not know
    names: list[str] | None  # the names as sent, when they had to be decoded
    raw_items: list[msgspec.Raw] | None  # full Node objects, in Nodes mode


def filter_body(
    fleet: Fleet,
    cand: Candidates,
    *,
    passing: npt.NDArray[np.intp],
    codes: npt.NDArray[np.int8],
    free: npt.NDArray[np.int32],
    total: npt.NDArray[np.int32],
    reason_of: verdicts.Reasons,
    encoder: msgspec.json.Encoder,
) -> bytes:
    """The ExtenderFilterResult, written from indices: one message per distinct reason, not per node."""
    names = fleet.json_names()
    index = cand.index
    known = index >= 0
    failed = verdicts.is_resolvable(codes)
    sized = (codes == verdicts.FULL) | (codes == verdicts.TOO_SMALL)
    base = int(total.max(initial=0)) + 1
    free_c = np.clip(free, 0, base - 1).astype(np.int64)
    keys = codes.astype(np.int64) * (base * base) + np.where(sized, free_c * base + total, 0)
    maps: list[bytes] = []
    for wanted in (failed & known, ~failed & known & (codes != verdicts.PASS)):
        at = np.flatnonzero(wanted)
        first, value_of = group(keys[at])
        values = [
            encoder.encode(reason_of(int(codes[at[j]]), int(free[at[j]]), int(total[at[j]]))) for j in first.tolist()
        ]
        maps.append(names.object(index[at], value_of, values))
    unknown = np.flatnonzero(~known)
    if len(unknown):
        assert cand.names is not None  # unknown nodes only come with decoded names
        reason = encoder.encode(reason_of(verdicts.UNKNOWN, 0, 0))
        extra = b",".join(encoder.encode(cand.names[i]) + b":" + reason for i in unknown.tolist())
        maps[1] = maps[1][:-1] + (b"," if len(maps[1]) > 2 else b"") + extra + b"}"
    if cand.raw_items is not None:
        items = cand.raw_items
        kept = b",".join([items[i] for i in passing.tolist()])  # Raw is bytes-like: joined without a copy each
        nodes_part, names_part = b'{"metadata":{},"items":[' + kept + b"]}", b"null"
    else:
        nodes_part, names_part = b"null", names.array(index[passing])
    return (
        b'{"Nodes":'
        + nodes_part
        + b',"NodeNames":'
        + names_part
        + b',"FailedNodes":'
        + maps[0]
        + b',"FailedAndUnresolvableNodes":'
        + maps[1]
        + b',"Error":""}'
    )


def pass_through(args: wire.ExtenderArgs) -> bytes:
    """Every node passes, as sent: the answer to a pod that asks for no GPU."""
    if bytes(args.node_names) != b"null":
        return (
            b'{"Nodes":null,"NodeNames":' + bytes(args.node_names) + b',"FailedNodes":{},'
            b'"FailedAndUnresolvableNodes":{},"Error":""}'
        )
    items = args.nodes.items if args.nodes is not None and args.nodes.items is not None else []
    nodes = b'{"metadata":{},"items":[' + b",".join(bytes(i) for i in items) + b"]}"
    return b'{"Nodes":' + nodes + b',"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def group(keys: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int32]]:
    """For each distinct key, the position of its first occurrence; for each key, which distinct one it is.

    Keys are few and small (verdict, free and total GPUs), so a dense table
    beats sorting; huge keys fall back to ``np.unique``.
    """
    if not len(keys):
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int32)
    top = int(keys.max()) + 1
    if top > 1 << 20:
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return first, inverse.astype(np.int32).reshape(-1)
    slot = np.full(top, -1, dtype=np.int64)
    slot[keys[::-1]] = np.arange(len(keys) - 1, -1, -1)  # the first occurrence wins
    first = np.flatnonzero(slot >= 0)
    number = np.full(top, -1, dtype=np.int32)
    number[first] = np.arange(len(first), dtype=np.int32)
    return slot[first].astype(np.intp), number[keys]


def all_unknown(n: int) -> verdicts.Verdicts:
    """The verdicts over a fleet with no GPU node at all (Volcano's placeholder List): no name is one kilter knows."""
    zeros = np.zeros(n, dtype=np.int32)
    return verdicts.Verdicts(np.full(n, verdicts.UNKNOWN, dtype=np.int8), zeros, zeros.copy())


_NAME_FIRST = b'{"metadata":{"name":"'


def fast_name(item: msgspec.Raw) -> str | None:
    """The node's name when the object starts as Go's encoder writes a Node (``{"metadata":{"name":"…``).

    Saves parsing 16-50 KB of Node per item just to find its name; anything
    else (other key order, an escaped name) goes through the decoder.
    """
    head = memoryview(item)[:320].tobytes()
    if not head.startswith(_NAME_FIRST):
        return None
    end = head.find(b'"', len(_NAME_FIRST))
    name = head[len(_NAME_FIRST) : end] if end > 0 else b"\\"
    if b"\\" in name or len(name) > MAX_NAME:  # the decoder refuses a name no Node can have
        return None
    try:
        return name.decode()
    except UnicodeDecodeError:
        return None
