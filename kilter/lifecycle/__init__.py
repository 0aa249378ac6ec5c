"""Fleet lifecycle (issue #23): node states, and maintenance planned and run without killing work needlessly.

``topology.lifecycle`` decides a node's next state (health over time,
qualification results); ``controller`` watches, writes the labels and the
Events, as the leader. ``topology.maintenance`` plans a drain; ``works``
reads what runs on the fleet for it, ``plan_doc`` is the plan as a document,
``drain`` runs one step at a time, resumable from the nodes (``progress``),
moving pods with ``evictions``; ``replan`` chooses each next step from the
cluster as it is then; ``requests`` drains the maintenance asked for on the
nodes, in the controller.
"""

from kilter.lifecycle import controller, drain, evictions, plan_doc, progress, replan, requests, works
from kilter.lifecycle.controller import LifecycleController
from kilter.lifecycle.drain import Drain

__all__ = [
    "Drain",
    "LifecycleController",
    "controller",
    "drain",
    "evictions",
    "plan_doc",
    "progress",
    "replan",
    "requests",
    "works",
]
