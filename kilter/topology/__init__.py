"""Topology-aware placement: the platform catalog, node health, the fleet model, gang plans and node scores."""

from kilter.topology import (
    catalog,
    config_file,
    eligibility,
    fleet,
    fleetgen,
    health,
    hypernodes,
    labels,
    plan,
    regions,
    repair,
    score,
    spare_settings,
    spares,
    split_wait,
    verdicts,
)
from kilter.topology.catalog import BUILTIN, Catalog, Platform, load_overrides
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.health import HealthSignals
from kilter.topology.plan import (
    GangRequest,
    Plan,
    PlannedPodSet,
    PodSetRequest,
    commit,
    gang_request,
    plan_gang,
)
from kilter.topology.score import score_pod, score_pod_json

__all__ = [
    "BUILTIN",
    "Catalog",
    "Fleet",
    "GangRequest",
    "HealthSignals",
    "Plan",
    "PlannedPodSet",
    "Platform",
    "PodSetRequest",
    "build_fleet",
    "catalog",
    "commit",
    "config_file",
    "eligibility",
    "fleet",
    "fleetgen",
    "gang_request",
    "health",
    "hypernodes",
    "labels",
    "load_overrides",
    "plan",
    "plan_gang",
    "regions",
    "repair",
    "score",
    "score_pod",
    "score_pod_json",
    "spare_settings",
    "spares",
    "split_wait",
    "verdicts",
]
