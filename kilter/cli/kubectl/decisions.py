"""The decisions kilter recorded about a job's pods (``/debug/explain``'s records), as ``explain`` shows them.

Only a running kilter holds them, so they appear when kilter answers the
view itself (``--kilter-service``, ``served``): the lookup is its
``DecisionLog.explain``. A reading of the cluster by the plugin alone has
none to show.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kilter.cli import render
from kilter.model.core_v1 import Pod

__all__ = ["MAX_PODS", "Recorded", "decisions", "render_decisions"]

MAX_PODS = 8  # pods shown per explain: a gang's first few tell its story
Recorded = Callable[[str, str], "list[dict[str, Any]] | None"]  # (namespace, pod) -> its records, None if none


def decisions(recorded: Recorded, pods: Sequence[Pod]) -> list[dict[str, Any]]:
    """The records of the first ``MAX_PODS`` pods by name; the rest are counted in a last entry."""
    ordered = sorted(pods, key=lambda p: p.metadata.name)
    out: list[dict[str, Any]] = []
    for pod in ordered[:MAX_PODS]:
        name = pod.metadata.name
        records = recorded(pod.metadata.namespace, name)
        if records is None:
            out.append({"pod": name, "decisions": [], "note": "kilter recorded no decision about this pod"})
        else:
            out.append({"pod": name, "decisions": records})
    if len(ordered) > MAX_PODS:
        out.append({"pod": None, "decisions": [], "note": f"{len(ordered) - MAX_PODS} more pods not shown"})
    return out


def render_decisions(entries: list[dict[str, Any]]) -> str:
    rows = []
    for e in entries:
        if not e["decisions"]:
            rows.append((e["pod"] or "...", "-", "-", e.get("note", "")))
        for d in e["decisions"]:
            rows.append((e["pod"], d.get("verb", ""), d.get("time", ""), d.get("summary", "")))
    return "Recorded decisions (kilter /debug/explain):\n" + render.table(("POD", "VERB", "TIME", "SUMMARY"), rows)
