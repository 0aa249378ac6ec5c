"""A node's progress through maintenance, kept on the node itself so that any drain, anywhere, resumes it.

The annotation ``kilter.dev/maintenance-progress`` holds
``{"plan": ID, "step": N, "phase": P, "cordoned": B, "served": [NAMES]}``:
the plan working on the node, its step, the phase it reached, whether
kilter cordoned it (and so may uncordon it), and the maintenance requests
(``kilter.dev/maintenance: NAME``) it has completed, kept across every later
plan so that a finished request is never carried out again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kilter.state.store import ClusterStore

__all__ = [
    "MAINTENANCE",
    "MAINTENANCE_DONE",
    "MAINTENANCE_PROGRESS",
    "PHASES",
    "Progress",
    "progress_in",
    "progress_of",
    "stored_progress",
]

MAINTENANCE = "kilter.dev/maintenance"
"""Node annotation a person or tooling sets to ask for maintenance (a request's name; ``lifecycle.requests``)."""
MAINTENANCE_PROGRESS = "kilter.dev/maintenance-progress"
"""Node annotation, written by kilter's drains only: the node's progress through a plan (JSON)."""
MAINTENANCE_DONE = "kilter.dev/maintenance-done"
"""Node label the maintenance tooling sets to ``"true"`` when its work on the node is done."""
PHASES = ("draining", "maintenance", "qualifying", "done")


@dataclass(frozen=True)
class Progress:
    plan: str
    step: int
    phase: str
    cordoned: bool  # kilter cordoned the node (it was schedulable): kilter uncordons it when done
    served: tuple[str, ...] = ()  # the maintenance requests this node has completed

    def encode(self) -> str:
        data = {"plan": self.plan, "step": self.step, "phase": self.phase, "cordoned": self.cordoned}
        if self.served:
            data["served"] = list(self.served)
        return json.dumps(data, separators=(",", ":"))


def progress_in(annotations: Mapping[str, str]) -> Progress | None:
    """The progress in a node's annotations, or None when it has none (or one no drain wrote: a person's edit is
    treated as none, so the node starts over rather than being trusted half-way)."""
    raw = annotations.get(MAINTENANCE_PROGRESS)
    if not isinstance(raw, str):
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    plan, step, phase, cordoned = (data.get(k) for k in ("plan", "step", "phase", "cordoned"))
    if not isinstance(plan, str) or not isinstance(step, int) or phase not in PHASES or not isinstance(cordoned, bool):
        return None
    served = data.get("served", [])
    names = tuple(s for s in served if isinstance(s, str)) if isinstance(served, list) else ()
    return Progress(plan, step, phase, cordoned, names)


def progress_of(node: Mapping[str, Any]) -> Progress | None:
    """``progress_in`` of a node object as the API server sends it."""
    notes = (node.get("metadata") or {}).get("annotations") or {}
    return progress_in(notes) if isinstance(notes, Mapping) else None


def stored_progress(store: ClusterStore, name: str) -> Progress | None:
    """``progress_in`` of the node named ``name`` as the watched state holds it (None without it)."""
    node = store.node_named(name)
    return progress_in(node.metadata.annotations) if node is not None else None
