"""Read a snapshot file from disk: JSON straight into typed objects, anything else through the YAML loader.

The file is mapped, not read: msgspec decodes the mapped bytes in place, so
a 1.4 GB ``kubectl get -o json`` costs no copy into a Python ``bytes`` and
no ``str`` of it at all. Text that starts like JSON but does not parse as
JSON is handed to the YAML loader (YAML's flow style starts with ``{`` too),
which words the error as it always has; a file too large for that to be
YAML anyone wrote gets msgspec's own message.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from kilter.model.errors import InputError
from kilter.model.files import open_regular
from kilter.state import snapshot, snapshot_json
from kilter.state.snapshot_json import Decoded

__all__ = ["YAML_RETRY_BYTES", "no_collection", "read"]

YAML_RETRY_BYTES = 16 * 1024**2
"""Malformed JSON up to this size is tried as YAML before it is refused (bytes); past it, it is refused at once."""


def read(
    path: Path,
    known: Iterable[tuple[str, str]],
    *,
    strict: bool = True,
    skip: frozenset[tuple[str, str]] = frozenset(),
) -> Decoded:
    """The objects of the snapshot at ``path``, kept by ``known`` (API group, kind), less the kinds in ``skip``.

    From JSON, Nodes and Pods come typed (``strict``: one that does not type
    is an InputError; otherwise it stays a dict among the raw objects); from
    YAML, every object comes as a dict, for the caller to type. Skipped kinds
    are left out (from JSON, unread: see ``snapshot_json.decode``).
    """
    with no_collection():
        return _read(path, frozenset(known), strict=strict, skip=skip)


def _read(path: Path, known: frozenset[tuple[str, str]], *, strict: bool, skip: frozenset[tuple[str, str]]) -> Decoded:
    data = _map(path)
    if snapshot_json.looks_like_json(data):
        try:
            return snapshot_json.decode(data, known, strict=strict, skip=skip)
        except msgspec.DecodeError as exc:
            if len(data) > YAML_RETRY_BYTES:
                raise InputError(f"{path} is not valid YAML or JSON: {exc}") from None
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    docs = snapshot.parse_documents(text, source=str(path))
    raw = snapshot.group_objects(docs, set(known))
    for kind in skip:
        raw.by_kind.pop(kind, None)
    return Decoded([], raw)


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """The cyclic collector off while a snapshot is decoded: it would walk the millions of new objects again and
    again (1.5 s of a 150,000-pod read), and none of them can be garbage yet."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _map(path: Path) -> Any:
    """The file's bytes, mapped read-only (``b""`` for an empty file, which cannot be mapped); only a regular file
    within the size limit is opened (a FIFO would block the reload for good)."""
    fd, size = open_regular(path, snapshot.MAX_SNAPSHOT_BYTES)
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
