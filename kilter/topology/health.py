"""What makes a GPU node unusable: kilter's built-in rules, plus the health signals GPU health tools set.

A node kilter may not place on is one a person or a controller has said is
bad. Some of those marks are Kubernetes' own and always apply (the
*built-in rules*):

* cordoned (``spec.unschedulable``);
* the ``Ready`` condition not ``True``;
* a ``node.kubernetes.io/*`` taint with effect ``NoSchedule`` or ``NoExecute``
  (the node lifecycle controller's ``not-ready``, ``unreachable`` ...);
* ``amd.com/gpu-mesh-validation=failed`` (AMD GPU Operator's xGMI mesh check);
* ``kilter.dev/lifecycle`` set to anything but ``ready`` (qualifying, degraded, in maintenance, repairing,
  retired, or a value that is no state at all: a typo must not send gangs to a node being qualified).

(A tray that lost ``nvidia.com/gpu.clique`` is not unusable: ``fleet.py``
makes it a detached one-node domain.) The rest come from GPU health tools,
each with its own vocabulary of node conditions, taints and labels: a list of
*health signals* (``HealthSignals``), configured from YAML (``load``), with
``DEFAULTS`` when nothing is configured. Every default was read in its tool's
own source or documentation; ``ref`` of each names where:

* NVIDIA NVSentinel sets a node condition named after the check that failed,
  ``True`` on a fatal event (NVIDIA/NVSentinel
  ``platform-connectors/pkg/connectors/kubernetes/process_node_events.go``):
  the GPU health monitor's DCGM watches ``Gpu<Watch>Watch``
  (``health-monitors/gpu-health-monitor/gpu_health_monitor/platform_connector/platform_connector.py``,
  the list in ``docs/INTEGRATIONS.md``), the syslog monitor's ``SysLogs*``
  checks (``health-monitors/syslog-health-monitor/pkg/syslog-monitor/types.go``)
  and the CSP monitor's ``CSPMaintenance``
  (``distros/kubernetes/nvsentinel/charts/fault-quarantine/values.yaml``).
  Its taints are the operator's own choice (none by default), so none is a default.
* The EKS node monitoring agent sets ``AcceleratedHardwareReady`` ``False`` on a
  GPU or Neuron fault (aws/eks-node-monitoring-agent ``README.md``;
  https://docs.aws.amazon.com/eks/latest/userguide/node-health-nma.html).
* AKS runs Node Problem Detector with GPU checks whose conditions turn ``True``:
  ``GPUMissing``, ``NVLinkStatusInactive``, ``XIDErrors``, ``IBLinkFlapping``
  (https://learn.microsoft.com/en-us/azure/aks/node-problem-detector,
  https://learn.microsoft.com/en-us/azure/aks/gpu-health-monitoring).
* Nebius Managed Kubernetes sets ``NebiusGPUError`` ``True``
  (https://docs.nebius.com/kubernetes/maintenance/health-checks).
* The AMD GPU Operator taints a node it remediates ``amd-gpu-unhealthy``
  (ROCm/gpu-operator ``internal/controllers/remediation_handler.go``,
  ``docs/autoremediation/auto-remediation.md``), and its cluster validation
  labels a node ``<phase key>=failed`` per phase: ``amd.com/gpu-hw-acceptance``,
  ``amd.com/nic-health``, ``amd.com/rail-bandwidth``,
  ``amd.com/cluster-validation-status``
  (``example/gpu-validation-cluster/configs/cluster-validation-config.yaml`` and
  ``tests/test_phase_node_label_script.sh``).

No signal of GKE, the NVIDIA GPU Operator, DCGM or GPU Feature Discovery was
found beyond the built-in rules and the clique label; Kueue's TAS node
replacement reacts to ``NotReady`` and to untolerated taints, which the
built-in rules and kilter's per-pod taint matching already cover.

``unusable_reason`` answers for one node with a short reason (``condition
GpuNvlinkWatch=True (NVSentinel)``) or None. It runs once per node and fleet
build, so the signals are indexed by name once: a node that matches nothing
costs a string compare per condition (its type is looked up only when its
status is one a signal fails on), a lookup per taint it carries, and one per
label signal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pydantic

from kilter.model.annotations import LIFECYCLE, LIFECYCLE_STATES
from kilter.model.core_v1 import Node
from kilter.model.errors import InputError
from kilter.topology.config_file import read_yaml

__all__ = [
    "AMD_MESH_LABEL",
    "BLOCKING_EFFECTS",
    "DEFAULTS",
    "HEALTH_TAINT_PREFIX",
    "ConditionSignal",
    "HealthSignals",
    "LabelSignal",
    "Signal",
    "TaintSignal",
    "load",
    "parse",
]

HEALTH_TAINT_PREFIX = "node.kubernetes.io/"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
AMD_MESH_LABEL = "amd.com/gpu-mesh-validation"
READY = "Ready"

ConditionStatus = Literal["True", "False", "Unknown"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
ALL_EFFECTS: tuple[TaintEffect, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _strings(value: Any, *, capital: bool) -> Any:
    """One value or a list of them as a tuple of strings; a YAML boolean as its word (``True`` for a condition
    status, ``true`` for a label or taint value), since ``status: True`` unquoted is what people write."""
    items = value if isinstance(value, list | tuple) else [value]
    out = []
    for item in items:
        if isinstance(item, bool):
            word = str(item)
            item = word if capital else word.lower()
        out.append(item)
    return tuple(out)


class _Signal(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    source: str = ""
    """The tool that sets the signal, named in each reason (``NVSentinel``)."""
    ref: str = ""
    """Where the signal is documented (a repository file or a URL): kept for people, never read."""

    def _by(self) -> str:
        return f" ({self.source})" if self.source else ""


class ConditionSignal(_Signal):
    """A node condition whose status (one of ``status``) means the node's GPUs failed."""

    condition: str = pydantic.Field(min_length=1)
    status: tuple[ConditionStatus, ...] = pydantic.Field(default=("True",), min_length=1)

    @pydantic.field_validator("status", mode="before")
    @classmethod
    def _status_words(cls, value: Any) -> Any:
        return _strings(value, capital=True)

    @pydantic.field_validator("condition")
    @classmethod
    def _not_ready(cls, value: str) -> str:
        if value == READY:
            raise ValueError("Ready is a built-in rule (a node whose Ready is not True is unusable)")
        return value

    def reason(self, status: str) -> str:
        return f"condition {self.condition}={status}{self._by()}"


class TaintSignal(_Signal):
    """A taint with key ``taint`` (and value ``value`` when given) and one of ``effects``."""

    taint: str = pydantic.Field(min_length=1)
    value: str | None = None
    effects: tuple[TaintEffect, ...] = pydantic.Field(default=ALL_EFFECTS, min_length=1)

    @pydantic.field_validator("value", mode="before")
    @classmethod
    def _value_word(cls, value: Any) -> Any:
        return str(value).lower() if isinstance(value, bool) else value

    @pydantic.field_validator("effects", mode="before")
    @classmethod
    def _effect_list(cls, value: Any) -> Any:
        return _strings(value, capital=True)

    def matches(self, value: str, effect: str) -> bool:
        return effect in self.effects and (self.value is None or self.value == value)

    def reason(self, value: str, effect: str) -> str:
        shown = f"{self.taint}={value}" if value else self.taint
        return f"taint {shown}:{effect}{self._by()}"


class LabelSignal(_Signal):
    """A label whose value (one of ``values``) means the node failed a health check."""

    label: str = pydantic.Field(min_length=1)
    values: tuple[str, ...] = pydantic.Field(min_length=1)

    @pydantic.field_validator("values", mode="before")
    @classmethod
    def _value_words(cls, value: Any) -> Any:
        return _strings(value, capital=False)

    def reason(self, value: str) -> str:
        return f"label {self.label}={value}{self._by()}"


Signal = ConditionSignal | TaintSignal | LabelSignal
_KINDS: dict[str, type[ConditionSignal] | type[TaintSignal] | type[LabelSignal]] = {
    "condition": ConditionSignal,
    "taint": TaintSignal,
    "label": LabelSignal,
}


@dataclass(frozen=True)
class HealthSignals:
    """The health signals in force, in the order given, indexed by condition type, taint key and label key."""

    signals: tuple[Signal, ...] = ()
    _conditions: dict[str, tuple[ConditionSignal, ...]] = field(init=False, repr=False, compare=False)
    _true_failing: frozenset[str] = field(init=False, repr=False, compare=False)  # types failing when True
    _other_failing: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)  # type: other statuses
    _other_types: tuple[str, ...] = field(init=False, repr=False, compare=False)  # its keys: few, scanned in C
    _taints: dict[str, tuple[TaintSignal, ...]] = field(init=False, repr=False, compare=False)
    _labels: tuple[tuple[str, frozenset[str], LabelSignal], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        conditions: dict[str, list[ConditionSignal]] = {}
        taints: dict[str, list[TaintSignal]] = {}
        labels: list[tuple[str, frozenset[str], LabelSignal]] = []
        for s in self.signals:
            if isinstance(s, ConditionSignal):
                conditions.setdefault(s.condition, []).append(s)
            elif isinstance(s, TaintSignal):
                taints.setdefault(s.taint, []).append(s)
            else:
                labels.append((s.label, frozenset(s.values), s))
        object.__setattr__(self, "_conditions", {k: tuple(v) for k, v in conditions.items()})
        statuses = {k: frozenset(st for c in v for st in c.status) for k, v in conditions.items()}
        other = {k: v - {"True"} for k, v in statuses.items() if v - {"True"}}
        object.__setattr__(self, "_true_failing", frozenset(k for k, v in statuses.items() if "True" in v))
        object.__setattr__(self, "_other_failing", other)
        object.__setattr__(self, "_other_types", tuple(other))
        object.__setattr__(self, "_taints", {k: tuple(v) for k, v in taints.items()})
        object.__setattr__(self, "_labels", tuple(labels))

    def __len__(self) -> int:
        return len(self.signals)

    def extended(self, more: Iterable[Signal]) -> HealthSignals:
        """These signals, then ``more``."""
        return HealthSignals((*self.signals, *more))

    def unusable_reason(self, node: Node) -> str | None:
        """Why ``node`` is unusable, in a few words, or None when it is usable.

        The built-in rules are asked first, then the signals in the order
        given, so one node gets one reason however many marks it carries.
        """
        if node.spec.unschedulable:
            return "cordoned"
        hit = None
        true_failing, other_types = self._true_failing, self._other_types
        # Most conditions are healthy and most signals fail on True: test the status first, a string compare, so
        # that a condition's type (a fresh string off the wire, its hash not yet known) is hashed only when needed.
        for cond in node.status.conditions:
            status = cond.status
            if status == "True":
                if hit is None and cond.type in true_failing:
                    hit = cond
            elif cond.type == READY:
                return f"condition Ready={status}"
            elif hit is None and cond.type in other_types and status in self._other_failing[cond.type]:
                hit = cond
        taint_hit = None
        for taint in node.spec.taints:
            key = taint.key
            if key.startswith(HEALTH_TAINT_PREFIX) and taint.effect in BLOCKING_EFFECTS:
                return f"taint {key}:{taint.effect}"
            if taint_hit is None and key in self._taints:
                signal = next((t for t in self._taints[key] if t.matches(taint.value, taint.effect)), None)
                taint_hit = None if signal is None else signal.reason(taint.value, taint.effect)
        labels = node.metadata.labels
        if AMD_MESH_LABEL in labels and labels[AMD_MESH_LABEL] == "failed":
            return f"label {AMD_MESH_LABEL}=failed (AMD GPU Operator)"
        state = labels.get(LIFECYCLE)
        if state is not None and state != "ready":
            if state in LIFECYCLE_STATES:
                return f"lifecycle {state}"
            return f"label {LIFECYCLE}={state[:40]!r} is no lifecycle state ({', '.join(LIFECYCLE_STATES)})"
        if hit is not None:
            return next(c for c in self._conditions[hit.type] if hit.status in c.status).reason(hit.status)
        if taint_hit is not None:
            return taint_hit
        for key, values, label in self._labels:
            if key in labels and labels[key] in values:
                return label.reason(labels[key])
        return None


def _conditions(names: Sequence[str], status: ConditionStatus, source: str, ref: str) -> list[Signal]:
    return [ConditionSignal(condition=n, status=(status,), source=source, ref=ref) for n in names]


_NVSENTINEL = "NVSentinel"
_NVSENTINEL_GPU = (
    "NVIDIA/NVSentinel health-monitors/gpu-health-monitor/gpu_health_monitor/platform_connector/platform_connector.py; "
    "platform-connectors/pkg/connectors/kubernetes/process_node_events.go; docs/INTEGRATIONS.md"
)
_NVSENTINEL_SYSLOG = "NVIDIA/NVSentinel health-monitors/syslog-health-monitor/pkg/syslog-monitor/types.go"
_NVSENTINEL_CSP = (
    "NVIDIA/NVSentinel distros/kubernetes/nvsentinel/charts/fault-quarantine/values.yaml; docs/INTEGRATIONS.md"
)
_AKS = (
    "https://learn.microsoft.com/en-us/azure/aks/node-problem-detector; "
    "https://learn.microsoft.com/en-us/azure/aks/gpu-health-monitoring"
)
_AMD_VALIDATION = (
    "ROCm/gpu-operator example/gpu-validation-cluster/configs/cluster-validation-config.yaml; "
    "example/gpu-validation-cluster/tests/test_phase_node_label_script.sh"
)

DEFAULTS = HealthSignals(
    (
        *_conditions(
            (
                "GpuPcieWatch",
                "GpuNvlinkWatch",
                "GpuPmuWatch",
                "GpuMcuWatch",
                "GpuMemWatch",
                "GpuSmWatch",
                "GpuInforomWatch",
                "GpuThermalWatch",
                "GpuPowerWatch",
                "GpuDriverWatch",
                "GpuNvswitchFatalWatch",
            ),
            "True",
            _NVSENTINEL,
            _NVSENTINEL_GPU,
        ),
        *_conditions(
            ("SysLogsXIDError", "SysLogsSXIDError", "SysLogsGPUFallenOff"), "True", _NVSENTINEL, _NVSENTINEL_SYSLOG
        ),
        *_conditions(("CSPMaintenance",), "True", _NVSENTINEL, _NVSENTINEL_CSP),
        *_conditions(
            ("AcceleratedHardwareReady",),
            "False",
            "EKS node monitoring agent",
            "aws/eks-node-monitoring-agent README.md; https://docs.aws.amazon.com/eks/latest/userguide/node-health-nma.html",
        ),
        *_conditions(("GPUMissing", "NVLinkStatusInactive", "XIDErrors", "IBLinkFlapping"), "True", "AKS NPD", _AKS),
        *_conditions(
            ("NebiusGPUError",), "True", "Nebius", "https://docs.nebius.com/kubernetes/maintenance/health-checks"
        ),
        TaintSignal(
            taint="amd-gpu-unhealthy",
            source="AMD GPU Operator",
            ref=(
                "ROCm/gpu-operator internal/controllers/remediation_handler.go; "
                "docs/autoremediation/auto-remediation.md"
            ),
        ),
        *(
            LabelSignal(label=key, values=("failed",), source="AMD GPU Operator", ref=_AMD_VALIDATION)
            for key in (
                "amd.com/gpu-hw-acceptance",
                "amd.com/nic-health",
                "amd.com/rail-bandwidth",
                "amd.com/cluster-validation-status",
            )
        ),
    )
)
"""The signals in force when no ``--health-signals`` file is given; each one's ``source`` and ``ref`` say whose."""


def parse(data: Any, *, where: str = "health signals") -> HealthSignals:
    """The signals a parsed ``--health-signals`` document describes.

    ``{signals: [...]}`` replaces ``DEFAULTS``; ``defaults: true`` keeps them
    and adds the list after them. Each entry names exactly one of
    ``condition``, ``taint`` or ``label``. ``InputError`` (with the JSON path
    of the culprit) for anything else.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InputError(f"{where} must be a mapping with a 'signals' list")
    unknown = sorted(str(k) for k in data if k not in ("signals", "defaults"))
    if unknown:
        raise InputError(
            f"{where}: unknown key {unknown[0]!r} (expected 'signals' and 'defaults')", path=f"$.{unknown[0]}"
        )
    keep = data.get("defaults", False)
    if not isinstance(keep, bool):
        raise InputError(f"{where}: 'defaults' must be true or false", path="$.defaults")
    raw = data.get("signals", [])
    if not isinstance(raw, list):
        raise InputError(f"{where}: 'signals' must be a list", path="$.signals")
    signals = [_signal(item, path=f"$.signals[{i}]", where=where) for i, item in enumerate(raw)]
    return DEFAULTS.extended(signals) if keep else HealthSignals(tuple(signals))


def _signal(item: Any, *, path: str, where: str) -> Signal:
    kinds = [k for k in _KINDS if isinstance(item, Mapping) and k in item]
    if len(kinds) != 1:
        raise InputError(f"{where}: each signal names exactly one of condition, taint or label", path=path)
    try:
        return _KINDS[kinds[0]].model_validate(dict(item))
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise InputError(f"{where}: {kinds[0]} signal: {err['msg']}", path=f"{path}.{loc}" if loc else path) from None


def load(path: Path) -> HealthSignals:
    """The signals of a ``--health-signals`` YAML file (``parse``); InputError, in one line, if it is unreadable."""
    return parse(read_yaml(path, "health signals file"), where=f"health signals file {path}")
