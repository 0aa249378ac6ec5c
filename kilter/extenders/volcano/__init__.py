"""Volcano's extender-plugin verbs: one package, one module per concern.

- ``verbs``: ``VolcanoExtender``, one handler per verb (decode, decide, encode);
- ``wire``: the plugin's wire types; ``reading``: bodies into them, with the
  header paths of the hot verbs; ``nodeinfo_stream``: prioritize's node names
  read while the body arrives; ``answers``: the answer bodies;
- ``session``: the open session and what it placed and permitted;
- ``quota_jobs``: Volcano jobs and queues as ``kilter.quota.bound_queues``
  reads them; ``quota_view``: the quota view, cached per state version and
  session;
- ``shaping``: a job's pending tasks shaped into a gang; ``placement``: node
  verdicts, scores, and gangs held to their plans;
- ``events``: paced PodGroup Events; ``notes``: the reasons ``/debug/volcano`` shows.
"""

from kilter.extenders.volcano import (
    answers,
    events,
    nodeinfo_stream,
    notes,
    placement,
    quota_jobs,
    quota_view,
    reading,
    session,
    shaping,
    verbs,
    wire,
)
from kilter.extenders.volcano.answers import legacy_predicate
from kilter.extenders.volcano.events import EventSink, PodGroupEvents
from kilter.extenders.volcano.verbs import VOLCANO_VERBS, VolcanoExtender

__all__ = [
    "VOLCANO_VERBS",
    "EventSink",
    "PodGroupEvents",
    "VolcanoExtender",
    "answers",
    "events",
    "legacy_predicate",
    "nodeinfo_stream",
    "notes",
    "placement",
    "quota_jobs",
    "quota_view",
    "reading",
    "session",
    "shaping",
    "verbs",
    "wire",
]
