"""Watchers of a kind hear of every change the store applies: a first list, a relist's difference, each event."""

from __future__ import annotations

from typing import Any

from kilter.state.store import DELETED, MODIFIED, ClusterStore, Event

KUEUE = "kueue.x-k8s.io"


def workload(name: str, phase: str = "") -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "labels": {"phase": phase}},
    }


def names(obj: Any) -> str | None:
    return None if obj is None else f"{obj['metadata']['name']}:{obj['metadata']['labels']['phase']}"


def test_watchers_hear_first_lists_relists_and_events_of_their_kind_only() -> None:
    store = ClusterStore()
    heard: list[tuple[str | None, str | None]] = []
    store.watchers.add(KUEUE, "Workload", lambda old, new: heard.append((names(old), names(new))))
    store.replace_kind(KUEUE, "Workload", [workload("a"), workload("b")])  # a live feed's first list
    assert sorted(heard) == [(None, "a:"), (None, "b:")]
    heard.clear()
    store.replace([workload("a", "done")])  # a snapshot reload: a changed, b gone
    assert sorted(heard, key=str) == [("a:", "a:done"), ("b:", None)]
    heard.clear()
    store.apply([Event(MODIFIED, workload("a", "done"))])  # no change: nothing to hear
    store.apply([Event(DELETED, workload("a", "done"))])
    store.apply([Event(MODIFIED, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})])
    assert heard == [("a:done", None)]
