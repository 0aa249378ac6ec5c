"""The node names of a Volcano ``prioritize`` body, read while the body arrives.

A 5,000-node body is ~76 MB: uvicorn delivers it in ~64 KB pieces over
~150 ms, and scanning it whole for its NodeInfo headers
(``NameIndex.lookup_nodeinfos``) takes ~13 ms after the last one, besides
~50 ms to join the pieces. Fed each piece as it comes, ``NodeNamesReader``
scans it then (``NameIndex.scan_nodeinfos``), so only the last piece is left
when the body ends and the pieces need no joining. It keeps no copy of the
body, only the head up to the nodes marker (the task) and a carry of a few
hundred bytes across pieces.

It follows the whole-body path (``reading.BodyReader.prioritize``) rule
for rule: the body starts ``{"task":`` and ends ``]}``, the task is the
bytes before the first ``,"nodes":[`` (``prioritize_streamed`` decodes it),
the headers are searched from there on and verified against the same bytes,
and at least one is found. A body that breaks a rule, or that the reader
cannot vouch for (a name longer than Kubernetes allows, split across
pieces), ends in None: the caller then takes the whole-body path, which
answers from the same bytes as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter._native.names import NameIndex

__all__ = ["NodeNamesReader", "StreamedNodes"]

TASK_HEAD = b'{"task":'
NODES_KEY = b',"nodes":['
BODY_END = b"]}"
# Bytes kept before the point the next scan starts at: a header begins len(',{"Name":"') + name +
# len('",') = 12 + name bytes before its needle, at most 265 for a node name (253 bytes at most).
LOOKBACK = 320
# A piece's first bytes are scanned together with the carry. An element whose header begins in the
# carry ends (needle, name, quote) within 12 + 253 + 28 + 253 + 1 = 547 bytes of the piece's start,
# so the scan of the piece alone never meets one.
SEAM = 1024
# A name still open this many bytes after its needle is not a node name: the whole-body path decides.
MAX_PENDING = 4096
PARTS = 64  # index arrays kept apart before they are joined into one (finish() then joins at most this many)


@dataclass(frozen=True)
class StreamedNodes:
    """What a reader found in a whole body."""

    task: bytes  # the body's bytes between '{"task":' and the first ',"nodes":[' (not yet decoded)
    index: npt.NDArray[np.int32]  # int32 [NodeInfo headers, in order]: index in ``names``, -1 unknown
    names: NameIndex  # the index they were resolved with; stale once the fleet is rebuilt


class NodeNamesReader:
    """Fed a prioritize body piece by piece (``feed``), then ``finish``: the nodes, or None for the whole-body path.

    Each piece costs one memmem over it plus a scan of ~1.4 KB around its seam; nothing here raises
    on odd bytes (they end in None).
    """

    def __init__(self, names: NameIndex) -> None:
        self.names = names
        self.size = 0  # bytes fed
        self.failed = False  # the streamed read gave up: finish() is None
        self._head: list[bytes] = []  # the pieces until the marker is found (they hold the task)
        self._marker = -1  # body offset of the first ',"nodes":[', -1 until it is seen
        self._task = b""
        self._last = b""  # the body's last len(NODES_KEY) - 1 bytes so far
        self._carry = b""  # body[_carry_at:size]: what the next scan needs of the pieces before
        self._carry_at = 0
        self._resume = 0  # body offset the next scan starts at; every header before it is counted
        self._found: list[npt.NDArray[np.int32]] = []
        self._finished = False

    def feed(self, chunk: bytes) -> None:
        """Read the next piece of the body."""
        if self.failed or not chunk:
            return
        base = self.size
        self.size += len(chunk)
        if self._marker < 0:
            self._seek(chunk, base)
        else:
            self._scan_piece(chunk, base)
        self._last = (self._last + chunk[-(len(NODES_KEY) - 1) :])[-(len(NODES_KEY) - 1) :]

    def finish(self) -> StreamedNodes | None:
        """The task's bytes and the nodes' indices once the whole body is fed; None: take the whole-body path."""
        if self._finished:
            raise RuntimeError("finish() was already called")
        self._finished = True
        if self.failed or self._marker < 0 or not self._last.endswith(BODY_END):
            return None
        if self._scan(self._carry, self._carry_at, self._resume, final=True) < 0 or not self._found:
            return None
        index = self._found[0] if len(self._found) == 1 else np.concatenate(self._found)
        return StreamedNodes(self._task, index, self.names)

    def _seek(self, chunk: bytes, base: int) -> None:
        """Look for the marker, keeping the pieces before it; once found, scan what follows it."""
        if base < len(TASK_HEAD) <= self.size:
            first = b"".join(self._head) + chunk[: len(TASK_HEAD) - base]
            if first != TASK_HEAD:
                self._fail()
                return
        self._head.append(chunk)
        near = (self._last + chunk[: len(NODES_KEY) - 1]).find(NODES_KEY)
        if 0 <= near < len(self._last):  # the marker straddles the pieces
            marker = base - len(self._last) + near
        else:
            found = chunk.find(NODES_KEY)
            if found < 0:
                return
            marker = base + found
        self._marker = marker
        self._task = b"".join(self._head)[len(TASK_HEAD) : marker]
        self._head = []
        self._carry = self._last[len(self._last) - (base - marker) :] if marker < base else b""
        self._carry_at = min(marker, base)
        self._resume = marker
        self._scan_piece(chunk, base)

    def _scan_piece(self, chunk: bytes, base: int) -> None:
        """Scan the carry with the piece's first SEAM bytes, then the piece itself, and keep a new carry."""
        carry_at, resume = self._carry_at, self._resume
        seam = self._carry + chunk[:SEAM]
        if resume - carry_at <= len(seam):  # else the marker lies further on in the piece
            resume = self._scan(seam, carry_at, resume, final=False)
        if resume >= 0 and len(chunk) > SEAM:
            # A header reaching back before the piece ended within its first SEAM bytes: already counted.
            resume = self._scan(chunk, base, resume, final=False) if resume >= base else self._fail()
        if resume < 0:
            return
        if self.size - resume > MAX_PENDING:
            self._fail()
            return
        keep = max(resume - LOOKBACK, carry_at)
        self._carry = chunk[keep - base :] if keep >= base else self._carry[keep - carry_at :] + chunk
        self._carry_at = keep
        self._resume = resume

    def _scan(self, data: bytes, at: int, resume: int, *, final: bool) -> int:
        """Scan ``data`` (body offset ``at``) from body offset ``resume``: the next resume, or -1 on a failure."""
        index, _, after, ok = self.names.scan_nodeinfos(data, resume - at, floor=max(self._marker - at, 0), final=final)
        if not ok:
            return self._fail()
        if len(index):
            self._found.append(index)
            if len(self._found) == PARTS:
                self._found = [np.concatenate(self._found)]
        return at + after

    def _fail(self) -> int:
        self.failed = True
        self._head, self._carry, self._found = [], b"", []
        return -1
