"""The servers' verbs over the shared state: the kube-scheduler extender (Volcano and gRPC come later)."""

from kilter.extenders import explain, gangs, scheduler, server, wire
from kilter.extenders.scheduler import SchedulerExtender
from kilter.extenders.server import App

__all__ = ["App", "SchedulerExtender", "explain", "gangs", "scheduler", "server", "wire"]
