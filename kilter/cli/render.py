"""Output for people (tables) and programs (JSON, YAML), in one place."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

import yaml

from kilter.model.annotations import SPARE_NODES_PER_DOMAIN
from kilter.topology import spares
from kilter.topology.fleet import Fleet

__all__ = ["compress_names", "dump", "printable", "rfc3339", "spares_line", "table"]


def dump(data: Any, fmt: str) -> str:
    """JSON or YAML text of plain data (dicts, lists, str, int, float, bool, None)."""
    if fmt == "json":
        return json.dumps(data, indent=2, allow_nan=True) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    raise ValueError(f"unknown format {fmt}")


# C0 and C1 controls but the newline, and the invisible format characters that reorder or hide text (bidi
# embeddings, overrides and isolates, zero-width characters, the BOM).
_UNPRINTABLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: every control or invisible format character shown as its escape
    (``\\x1b``), newlines kept. What kilter prints comes partly from the cluster (messages, names, annotations),
    and an escape sequence there must not move the cursor, retitle the window or hide the lines above it."""
    return _UNPRINTABLE.sub(_escaped, text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned table, kubectl style; a cell's newlines and control characters are shown escaped."""
    cells = [
        [printable(str(h)) for h in headers],
        *[[printable(str(c)).replace("\n", "\\n") for c in row] for row in rows],
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


_TAIL = re.compile(r"^(.*?)(\d+)$")


def cell(v: object) -> str:
    """A table cell for a value that may be missing (``-``), unbounded (``inf``) or a float (four digits)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if v == float("inf") else f"{v:.4g}"
    return str(v)


def compress_names(names: Sequence[str]) -> str:
    """``gb200-r001-t00, -t01, -t02`` becomes ``gb200-r001-t[00-02]``; order and repeats are kept as counts."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    groups: dict[str, list[tuple[int, str]]] = {}
    plain: list[str] = []
    for n in sorted(counts):
        m = _TAIL.match(n)
        if m:
            groups.setdefault(m.group(1), []).append((int(m.group(2)), m.group(2)))
        else:
            plain.append(n)
    parts: list[str] = []
    for prefix, nums in groups.items():
        runs: list[list[tuple[int, str]]] = []
        for num in nums:
            if runs and num[0] == runs[-1][-1][0] + 1:
                runs[-1].append(num)
            else:
                runs.append([num])
        spans = [r[0][1] if len(r) == 1 else f"{r[0][1]}-{r[-1][1]}" for r in runs]
        parts.append(
            f"{prefix}{spans[0]}" if len(spans) == 1 and "-" not in spans[0] else f"{prefix}[{','.join(spans)}]"
        )
    parts.extend(plain)
    repeats = {n: c for n, c in counts.items() if c > 1}
    text = ", ".join(parts)
    if repeats:
        text += f" ({sum(repeats.values())} pods share {len(repeats)} node{'s' if len(repeats) > 1 else ''})"
    return text


def rfc3339(unix_s: float) -> str:
    """Unix seconds as RFC 3339 in UTC to the second (``2026-12-01T12:00:00Z``), as Kubernetes prints times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def spares_line(fleet: Fleet) -> str:
    """One line of the spare nodes the fleet keeps per platform (``topology.spares``), "" when none asks."""
    parts = [
        f"{p.platform} {p.held} held, {p.used} used, {p.short} short of {p.wanted} in {p.domains} domains"
        + (f", lent to preemptible pods in {p.lent}" if p.lent else "")
        for p in spares.by_platform(fleet)
    ]
    return f"spare nodes ({SPARE_NODES_PER_DOMAIN}): {'; '.join(parts)}" if parts else ""
