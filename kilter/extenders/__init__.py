"""The servers' verbs over the shared state: the kube-scheduler extender and Volcano's extender plugin."""

from kilter.extenders import (
    binder,
    explain,
    filter_answer,
    last_resort,
    preemption,
    readings,
    scheduler,
    server,
    volcano,
    wire,
)
from kilter.extenders.scheduler import SchedulerExtender
from kilter.extenders.server import App
from kilter.extenders.volcano import VOLCANO_VERBS, VolcanoExtender

__all__ = [
    "VOLCANO_VERBS",
    "App",
    "SchedulerExtender",
    "VolcanoExtender",
    "binder",
    "explain",
    "filter_answer",
    "last_resort",
    "preemption",
    "readings",
    "scheduler",
    "server",
    "volcano",
    "wire",
]
