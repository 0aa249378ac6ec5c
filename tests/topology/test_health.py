"""Health signals: each default marks a node unusable and names why; a file replaces or extends them; bad files
are one-line InputErrors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kilter.model import codec
from kilter.model.core_v1 import Node
from kilter.model.errors import InputError
from kilter.topology import health
from kilter.topology.fleet import build_fleet, is_node_usable
from kilter.topology.health import DEFAULTS, ConditionSignal, HealthSignals, LabelSignal, Signal, TaintSignal
from tests.topology.builders import CLIQUE, node_dict


def gb200(name: str = "n0", **kw: Any) -> dict[str, Any]:
    return node_dict(name, labels={CLIQUE: "r1"}, **kw)


def with_condition(raw: dict[str, Any], kind: str, status: str) -> dict[str, Any]:
    raw["status"]["conditions"].append({"type": kind, "status": status, "reason": "Whatever"})
    return raw


def with_taint(raw: dict[str, Any], key: str, value: str, effect: str) -> dict[str, Any]:
    raw.setdefault("spec", {}).setdefault("taints", []).append({"key": key, "value": value, "effect": effect})
    return raw


def with_label(raw: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    raw["metadata"]["labels"][key] = value
    return raw


def typed(raw: dict[str, Any]) -> Node:
    return codec.convert(raw, Node)


def failing(signal: Signal, name: str) -> dict[str, Any]:
    """A node that carries ``signal`` in its failing form."""
    if isinstance(signal, ConditionSignal):
        return with_condition(gb200(name), signal.condition, signal.status[0])
    if isinstance(signal, TaintSignal):
        return with_taint(gb200(name), signal.taint, signal.value or "AMDGPUXgmi", signal.effects[0])
    return with_label(gb200(name), signal.label, signal.values[0])


def healthy(signal: Signal, name: str) -> dict[str, Any]:
    """A node that carries the same condition, or the label, in its healthy form (no taint at all)."""
    if isinstance(signal, ConditionSignal):
        good = next(s for s in ("True", "False") if s not in signal.status)
        return with_condition(gb200(name), signal.condition, good)
    if isinstance(signal, TaintSignal):
        return gb200(name)
    return with_label(gb200(name), signal.label, "passed")


def label_of(signal: Signal) -> str:
    if isinstance(signal, ConditionSignal):
        return f"condition {signal.condition}={signal.status[0]}"
    if isinstance(signal, TaintSignal):
        return f"taint {signal.taint}"
    return f"label {signal.label}={signal.values[0]}"


@pytest.mark.parametrize("signal", DEFAULTS.signals, ids=label_of)
def test_each_default_signal_marks_its_node_unusable_and_says_whose_it_is(signal: Signal) -> None:
    fleet = build_fleet([typed(failing(signal, "n0")), typed(healthy(signal, "n1"))])
    usable = dict(zip(fleet.node_names, fleet.bitmap.node_usable_flags.tolist(), strict=True))
    assert usable == {"n0": 0, "n1": 1}
    reason = fleet.unusable_reason("n0")
    assert reason is not None and reason.startswith(label_of(signal)) and reason.endswith(f"({signal.source})")
    assert fleet.unusable_reason("n1") is None
    assert fleet.unusable == {"n0": reason}


def test_every_default_names_its_tool_and_where_it_is_documented() -> None:
    assert all(s.source and s.ref for s in DEFAULTS.signals)
    assert len({label_of(s) for s in DEFAULTS.signals}) == len(DEFAULTS)  # no signal listed twice


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param(gb200(cordoned=True), "cordoned", id="cordoned"),
        pytest.param(gb200(ready=False), "condition Ready=False", id="not Ready"),
        pytest.param(
            with_taint(gb200(), "node.kubernetes.io/unreachable", "", "NoExecute"),
            "taint node.kubernetes.io/unreachable:NoExecute",
            id="node lifecycle taint",
        ),
        pytest.param(
            with_label(gb200(), "amd.com/gpu-mesh-validation", "failed"),
            "label amd.com/gpu-mesh-validation=failed (AMD GPU Operator)",
            id="AMD mesh validation failed",
        ),
    ],
)
def test_the_built_in_rules_hold_with_no_signal_configured(raw: dict[str, Any], reason: str) -> None:
    none = HealthSignals()
    assert none.unusable_reason(typed(raw)) == reason
    assert not is_node_usable(typed(raw), none)


def test_a_lifecycle_taint_that_only_prefers_no_schedule_leaves_the_node_usable() -> None:
    raw = with_taint(gb200(), "node.kubernetes.io/unschedulable", "", "PreferNoSchedule")
    assert HealthSignals().unusable_reason(typed(raw)) is None


def test_a_built_in_rule_is_the_reason_when_a_signal_also_matches() -> None:
    raw = with_condition(gb200(cordoned=True), "GpuNvlinkWatch", "True")
    assert DEFAULTS.unusable_reason(typed(raw)) == "cordoned"
    raw = with_condition(gb200(ready=False), "GpuNvlinkWatch", "True")
    assert DEFAULTS.unusable_reason(typed(raw)) == "condition Ready=False"


def test_the_first_signal_given_is_the_reason_when_several_match() -> None:
    raw = with_label(with_condition(gb200(), "XIDErrors", "True"), "amd.com/nic-health", "failed")
    assert DEFAULTS.unusable_reason(typed(raw)) == "condition XIDErrors=True (AKS NPD)"


def test_a_signal_file_replaces_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "signals.yaml"
    path.write_text("signals:\n  - condition: GpuUnhealthy\n    source: gpu-checker\n")
    signals = health.load(path)
    nvlink = typed(with_condition(gb200(), "GpuNvlinkWatch", "True"))
    mine = typed(with_condition(gb200(), "GpuUnhealthy", "True"))
    assert signals.unusable_reason(nvlink) is None  # a default, no longer in force
    assert signals.unusable_reason(mine) == "condition GpuUnhealthy=True (gpu-checker)"
    assert DEFAULTS.unusable_reason(mine) is None


def test_defaults_true_keeps_the_defaults_and_adds_the_file_s_signals(tmp_path: Path) -> None:
    path = tmp_path / "signals.yaml"
    path.write_text("defaults: true\nsignals:\n  - label: example.com/gpu-health\n    values: [bad, worse]\n")
    signals = health.load(path)
    assert len(signals) == len(DEFAULTS) + 1
    assert signals.unusable_reason(typed(with_condition(gb200(), "GpuNvlinkWatch", "True"))) is not None
    assert signals.unusable_reason(typed(with_label(gb200(), "example.com/gpu-health", "worse"))) == (
        "label example.com/gpu-health=worse"
    )
    assert signals.unusable_reason(typed(with_label(gb200(), "example.com/gpu-health", "good"))) is None


def test_an_empty_signal_list_leaves_only_the_built_in_rules() -> None:
    signals = health.parse({"signals": []})
    assert len(signals) == 0
    assert signals.unusable_reason(typed(with_condition(gb200(), "GpuNvlinkWatch", "True"))) is None
    assert signals.unusable_reason(typed(gb200(cordoned=True))) == "cordoned"


@pytest.mark.parametrize(
    ("taint", "node_taint", "unusable"),
    [
        pytest.param(
            {"taint": "gpu.health/bad"}, ("gpu.health/bad", "x", "PreferNoSchedule"), True, id="any value, any effect"
        ),
        pytest.param(
            {"taint": "gpu.health/bad", "value": "fatal"},
            ("gpu.health/bad", "fatal", "NoSchedule"),
            True,
            id="value matches",
        ),
        pytest.param(
            {"taint": "gpu.health/bad", "value": "fatal"},
            ("gpu.health/bad", "degraded", "NoSchedule"),
            False,
            id="other value",
        ),
        pytest.param(
            {"taint": "gpu.health/bad", "effects": "NoExecute"},
            ("gpu.health/bad", "", "NoSchedule"),
            False,
            id="other effect",
        ),
        pytest.param(
            {"taint": "gpu.health/bad", "value": True},
            ("gpu.health/bad", "true", "NoSchedule"),
            True,
            id="YAML true is the value true",
        ),
    ],
)
def test_a_taint_signal_matches_its_key_value_and_effects(
    taint: dict[str, Any], node_taint: tuple[str, str, str], unusable: bool
) -> None:
    signals = health.parse({"signals": [taint]})
    reason = signals.unusable_reason(typed(with_taint(gb200(), *node_taint)))
    assert (reason is not None) is unusable
    if unusable:
        key, value, effect = node_taint
        assert reason == f"taint {key}={value}:{effect}" if value else f"taint {key}:{effect}"


def test_yaml_booleans_read_as_the_words_kubernetes_writes() -> None:
    signals = health.parse(
        {"signals": [{"condition": "GpuUnhealthy", "status": True}, {"label": "gpu/ok", "values": [False]}]}
    )
    assert signals.signals[0] == ConditionSignal(condition="GpuUnhealthy", status=("True",))
    assert signals.signals[1] == LabelSignal(label="gpu/ok", values=("false",))
    assert signals.unusable_reason(typed(with_label(gb200(), "gpu/ok", "false"))) == "label gpu/ok=false"


def test_a_condition_signal_may_name_several_failing_statuses() -> None:
    signals = health.parse({"signals": [{"condition": "GpuReady", "status": ["False", "Unknown"]}]})
    assert (
        signals.unusable_reason(typed(with_condition(gb200(), "GpuReady", "Unknown"))) == "condition GpuReady=Unknown"
    )
    assert signals.unusable_reason(typed(with_condition(gb200(), "GpuReady", "True"))) is None


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        pytest.param(["condition"], "$", "must be a mapping", id="not a mapping"),
        pytest.param({"signal": []}, "$.signal", "unknown key 'signal'", id="misspelt key"),
        pytest.param({"signals": {"condition": "X"}}, "$.signals", "must be a list", id="signals not a list"),
        pytest.param({"defaults": "yes"}, "$.defaults", "true or false", id="defaults not a boolean"),
        pytest.param({"signals": ["GpuX"]}, "$.signals[0]", "exactly one of", id="entry not a mapping"),
        pytest.param({"signals": [{"status": "True"}]}, "$.signals[0]", "exactly one of", id="no kind"),
        pytest.param({"signals": [{"condition": "A", "label": "b"}]}, "$.signals[0]", "exactly one of", id="two kinds"),
        pytest.param(
            {"signals": [{"condition": "A", "status": "Yes"}]},
            "$.signals[0].status.0",
            "condition signal",
            id="bad status",
        ),
        pytest.param(
            {"signals": [{"condition": "Ready", "status": "False"}]}, "$.signals[0].condition", "built-in", id="Ready"
        ),
        pytest.param(
            {"signals": [{"condition": ""}]}, "$.signals[0].condition", "condition signal", id="empty condition"
        ),
        pytest.param(
            {"signals": [{"taint": "t", "effects": ["NoRun"]}]},
            "$.signals[0].effects.0",
            "taint signal",
            id="bad effect",
        ),
        pytest.param({"signals": [{"label": "l"}]}, "$.signals[0].values", "label signal", id="label without values"),
        pytest.param(
            {"signals": [{"label": "l", "values": []}]}, "$.signals[0].values", "label signal", id="no values"
        ),
        pytest.param(
            {"signals": [{"label": "l", "values": ["x"], "absent": True}]},
            "$.signals[0].absent",
            "label signal",
            id="unknown field",
        ),
    ],
)
def test_a_bad_signal_document_is_an_input_error_with_its_path(data: Any, path: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        health.parse(data)
    assert err.value.path == path
    assert words in err.value.message
    assert "\n" not in str(err.value)


def test_an_unreadable_or_broken_file_is_a_one_line_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read health signals file"):
        health.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("signals: [\n  - condition: X\n   status: {")
    with pytest.raises(InputError) as err:
        health.load(broken)
    assert "is not valid YAML" in str(err.value) and "\n" not in str(err.value)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00signals")
    with pytest.raises(InputError, match="not UTF-8"):
        health.load(binary)


def test_an_empty_file_means_no_signal_beyond_the_built_in_rules(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert len(health.load(path)) == 0
