"""Typed decoding of Kubernetes objects with errors that carry a JSON path.

msgspec converts already-parsed YAML/JSON (or raw JSON bytes) into the view
Structs of this package; its ValidationError names the path (``$.spec.x``),
which becomes an ``InputError`` so callers print one line, never a traceback.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from kilter.model.errors import InputError

__all__ = ["convert", "decode_json"]

T = TypeVar("T")
_AT = re.compile(r"^(.*) - at `(\$[^`]*)`$")


def _input_error(exc: msgspec.ValidationError | msgspec.DecodeError, prefix: str) -> InputError:
    text = str(exc)
    match = _AT.match(text)
    if match:
        message, path = match.groups()
        return InputError(message, path=prefix + path[1:])
    return InputError(text, path=prefix)


def convert(obj: Any, kind: type[T], *, path: str = "$") -> T:
    """Convert a parsed object into ``kind``; InputError names the bad field."""
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise _input_error(exc, path) from None


def decode_json(data: bytes, kind: type[T], *, path: str = "$") -> T:
    """Decode JSON bytes straight into ``kind``."""
    try:
        return msgspec.json.decode(data, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _input_error(exc, path) from None
