"""Volcano's notes are published to the decision feed as they are noted: a job's as its PodGroup's, a queue's as
the cluster-scoped queue's; without a watcher nothing is built."""

from __future__ import annotations

from kilter.extenders.volcano.notes import Notes
from kilter.gangs.decisions import Decision, DecisionFeed


def test_each_note_is_a_decision_about_its_podgroup_or_queue() -> None:
    notes = Notes()
    notes.feed = feed = DecisionFeed()
    everything, ml = feed.subscribe(), feed.subscribe("ml")
    notes.add("ml/pg-1", "enqueue", "queue research would exceed its nominal quota")
    notes.add("queue/research", "overused", "research uses 40 of 32 GPUs")
    got = [everything.take(), everything.take()]
    assert all(isinstance(d, Decision) for d in got)
    assert [(d.source, d.verb, d.kind, d.namespace, d.name, d.message) for d in got if isinstance(d, Decision)] == [
        ("volcano", "enqueue", "podgroup", "ml", "pg-1", "queue research would exceed its nominal quota"),
        ("volcano", "overused", "queue", "", "research", "research uses 40 of 32 GPUs"),
    ]
    first = ml.take()
    assert isinstance(first, Decision) and first.name == "pg-1" and ml.take() is None
    assert notes["ml/pg-1"] == {"enqueue": "queue research would exceed its nominal quota"}  # still noted


def test_notes_without_a_watcher_publish_nothing() -> None:
    notes = Notes()
    notes.feed = feed = DecisionFeed()
    notes.add("ml/pg-1", "plan", "gang ml/podgroup/pg-1 planned")
    assert feed.published == 0
