"""Volcano's request bodies read into ``wire`` structs: header paths for the hot verbs, whole decodes for the rest.

Go's ``json.Marshal`` writes a struct's fields in their declared order with
no spaces, so the few fields kilter reads of the bodies Volcano sends most
(onSessionOpen once a cycle, predicate per task x node, prioritize per task)
are cut out by their keys and decoded alone: a NodeInfo is ~15 KB, of which
kilter reads a name and an Idle. A body that does not read that way (another
encoder, an unforeseen field order, bad JSON) is decoded whole, which also
words its errors; both paths give the same struct for the same body.
``BodyReader.whole_decodes`` counts the whole decodes by body kind: that is
how the tests and ``/metrics`` see Go's bodies take the header paths.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar, cast

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.extenders.volcano import wire as vw
from kilter.model import codec
from kilter.model.errors import InputError
from kilter.topology.fleet import Fleet

__all__ = ["BodyReader"]

S = TypeVar("S", bound=msgspec.Struct)

_FAILED = (msgspec.DecodeError, msgspec.ValidationError)
_TASK = codec.JsonDecoder(vw.TaskHead | None)  # prioritize: scores need no Pod
_TASK_WITH_POD = codec.JsonDecoder(vw.TaskInfo | None)  # predicate: the ladder reads the Pod's selectors
_RESOURCE = codec.JsonDecoder(vw.Resource | None)
_JOBS = codec.JsonDecoder(dict[str, vw.JobInfo] | None)
_QUEUES = codec.JsonDecoder(dict[str, vw.QueueInfo] | None)


class BodyReader:
    """One decoder per body kind, built on first use, and the count of bodies decoded whole by kind."""

    def __init__(self) -> None:
        self.whole_decodes: Counter[str] = Counter()  # kind name (``PredicateArgs`` ...) -> bodies decoded whole
        self._decoders: dict[type, codec.JsonDecoder[Any]] = {}

    def decode(self, kind: type[S], body: bytes) -> S:
        """``body`` decoded whole as ``kind``; an InputError naming the kind when it does not decode."""
        decoder = self._decoders.get(kind)
        if decoder is None:
            decoder = self._decoders[kind] = codec.JsonDecoder(kind)
        self.whole_decodes[kind.__name__] += 1
        try:
            return cast(S, decoder.decode(body))
        except _FAILED as exc:
            raise InputError(f"malformed {kind.__name__}: {exc}") from None

    def session_open(self, body: bytes) -> vw.SessionOpenArgs:
        """Jobs and Queues of the session, without reading its Nodes.

        The Nodes (every NodeInfo of the cluster, ~15 KB each) are most of an
        onSessionOpen body and kilter does not need them; Go writes the
        request's fields in order (Jobs, Nodes, Queues, NamespaceInfo, ...), so
        the Jobs and Queues values are cut out by their keys and decoded alone.
        Anything that does not decode that way is decoded whole.
        """
        head = b'{"Jobs":'
        nodes = body.find(b',"Nodes":') if body.startswith(head) else -1
        queues = body.rfind(b',"Queues":') if nodes > 0 else -1
        after = body.find(b',"NamespaceInfo":', queues) if queues > nodes else -1
        if after > 0:
            try:
                jobs = _JOBS.decode(body[len(head) : nodes])
                found = _QUEUES.decode(body[queues + len(b',"Queues":') : after])
                return vw.SessionOpenArgs(jobs=jobs, queues=found)
            except _FAILED:
                pass
        return self.decode(vw.SessionOpenArgs, body)

    def predicate(self, body: bytes) -> vw.PredicateArgs:
        """The task, and the node's Name and Idle, without reading the node's Node object and Tasks.

        Called once per task x node, with a ~15 KB NodeInfo of which kilter reads
        two fields: Go writes ``{"task":…,"node":{"Name":…,"Node":{…},…,"Idle":{…},"Used":…``
        in that order, so those are cut out by their keys and decoded alone.
        Anything that does not decode that way is decoded whole.
        """
        marker = b',"node":{"Name":"'
        at = body.find(marker) if body.startswith(b'{"task":') and body.endswith(b"}}") else -1
        if at > 0:
            name_end = body.find(b'"', at + len(marker))
            idle = body.find(b',"Idle":', name_end)
            used = body.find(b',"Used":', idle)
            name = body[at + len(marker) : name_end]
            if name_end > 0 and idle > name_end and used > idle and b"\\" not in name:
                try:
                    task = _TASK_WITH_POD.decode(body[len(b'{"task":') : at])
                    free = _RESOURCE.decode(body[idle + len(b',"Idle":') : used])
                    return vw.PredicateArgs(task, vw.NodeName(name.decode(), free))
                except (*_FAILED, UnicodeDecodeError):
                    pass
        return self.decode(vw.PredicateArgs, body)

    def prioritize(self, body: bytes, fleet: Fleet) -> tuple[vw.TaskHead, npt.NDArray[np.int32]]:
        """The task and the offered nodes' fleet indices (-1: unknown), read without decoding the nodes.

        Go writes ``{"task":…,"nodes":[NodeInfo…]}`` at ~15 KB per NodeInfo, of
        which only the names matter: the task is decoded alone and the names
        are read off the elements' headers by ``NameIndex.lookup_nodeinfos``
        (~5x faster than decoding 5,000 nodes). Anything unexpected
        (``"nodes"`` null, empty or not right after the task, a header that
        does not verify) takes the full decode, which also words the errors.
        ``nodeinfo_stream`` follows the same rules on headers read while the
        body arrived.
        """
        if body.startswith(b'{"task":') and body.endswith(b"]}"):  # json.Marshal's output, not cut short
            pos = body.find(b',"nodes":[')
            if pos > 0:
                task = self.task(body[len(b'{"task":') : pos])  # None: the marker was not the top-level key
                found = fleet.name_index.lookup_nodeinfos(body, pos) if task is not None else None
                if found is not None:
                    assert task is not None
                    return task, found[0]
        args = self.decode(vw.PrioritizeArgs, body)
        if args.task is None:
            raise InputError("task is null")
        if args.nodes is None:
            raise InputError("nodes is null")
        index = np.empty(len(args.nodes), dtype=np.int32)
        fleet.name_index.lookup([n.name for n in args.nodes], index)
        return args.task, index

    @staticmethod
    def task(raw: bytes) -> vw.TaskHead | None:
        """A task decoded alone from its bytes (a header path's cut); None when they are not one task."""
        try:
            return _TASK.decode(raw)
        except _FAILED:
            return None
