"""Durations as users write them in annotations and flags: Go durations plus days (``7d``, ``1h30m``, ``45s``)."""

from __future__ import annotations

import re

from kilter.model.errors import InputError

__all__ = ["parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str, *, path: str) -> float:
    """Seconds in a duration such as ``7d``, ``1h30m`` or ``45s`` (Go durations plus days)."""
    text = text.strip()
    pos = 0
    total = 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise InputError(f"{text!r} is not a duration like 7d, 36h, 90m or 1h30m", path=path)
    return total
