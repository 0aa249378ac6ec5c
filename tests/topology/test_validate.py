"""Topology validation on crafted fleets: each finding on the fleet that has it, nothing on a sound one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kilter.cli.main import main
from kilter.model.annotations import TOPOLOGY_ACK, UNPROTECTED_TOPOLOGY_ACK
from kilter.model.core_v1 import Node
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.validate import Report, validate
from tests.topology.builders import CLIQUE, node, rack

CATALOG = Catalog(BUILTIN)


def findings(nodes: list[Node]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(f.severity, f.kind, f.domain, f.nodes) for f in validate(nodes, CATALOG).findings]


def test_a_sound_fleet_has_no_findings() -> None:
    report = validate(
        [*rack("r1"), *rack("r2"), node("mi-1", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu")], CATALOG
    )
    assert report.findings == () and report.domains == {"GB200-NVL72": 2, "MI355X-8": 1}


def test_a_rack_with_17_trays_is_a_warning() -> None:
    (found,) = findings([*rack("r1", trays=17), *rack("r2")])
    assert found[:3] == ("warning", "trays-missing", "r1") and len(found[3]) == 17


def test_one_clique_label_on_two_racks_is_an_error() -> None:
    (found,) = findings([*rack("r1"), *rack("r1", prefix="r2")])
    assert found[:3] == ("error", "too-many-nodes", "r1") and len(found[3]) == 36


def test_a_node_short_of_gpus_is_an_error_naming_the_node() -> None:
    nodes = [*rack("r1", trays=17), node("r1-t17", gpus=3, labels={CLIQUE: "r1"})]
    assert findings(nodes) == [("error", "gpus-short", "r1", ("r1-t17",))]


def test_mixed_products_under_one_label_are_an_error() -> None:
    halves = [
        *rack("r1", trays=9),
        *(node(f"r1-t{t}", product="NVIDIA-GB300", labels={CLIQUE: "r1"}) for t in range(9, 18)),
    ]
    assert [f[:3] for f in findings(halves)] == [("error", "mixed-platforms", "r1")]
    odd = [*rack("r1", trays=17), node("r1-t17", product="NVIDIA-GB300", labels={CLIQUE: "r1"})]
    assert [f[:4] for f in findings(odd)][:1] == [("error", "disputed-member", "r1", ("r1-t17",))], "17 agree"


def test_a_node_claiming_another_racks_clique_is_the_one_error_and_names_that_node() -> None:
    imex = "nvidia.com/gpu.imex-domain"
    racks = [node(f"r{r}-t{t:02d}", labels={CLIQUE: f"r{r}", imex: f"i{r}"}) for r in (1, 2) for t in range(18)]
    racks[-1] = node("r2-t17", labels={CLIQUE: "r1", imex: "i2", UNPROTECTED_TOPOLOGY_ACK: "true"})
    report = validate(racks, CATALOG)
    assert [(f.severity, f.kind, f.domain, f.nodes) for f in report.findings] == [
        ("error", "disputed-member", "r1", ("r2-t17",)),
        ("warning", "ack-ignored", "r1", ("r2-t17",)),
        ("warning", "trays-missing", "r2", tuple(f"r2-t{t:02d}" for t in range(17))),
    ]
    assert f"{imex}=i2 where they have i1" in report.findings[0].message


def test_a_tray_without_its_clique_label_and_an_unknown_platform_are_errors() -> None:
    nodes = [*rack("r1", trays=17), node("r1-t17"), node("odd", labels={"kilter.dev/platform": "TPU-v9"})]
    assert findings(nodes) == [
        ("error", "unknown-platform", "kilter.dev/platform=TPU-v9", ("odd",)),
        ("warning", "trays-missing", "r1", tuple(f"r1-t{t:02d}" for t in range(17))),
        ("error", "domain-label-missing", "r1-t17", ("r1-t17",)),
    ], "by domain name"


def _snapshot(tmp_path: Path, nodes: list[Node]) -> Path:
    import msgspec

    path = tmp_path / "fleet.json"
    items: list[Any] = [msgspec.to_builtins(n) for n in nodes]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), encoding="utf-8")
    return path


def test_kilter_fleet_validate_exits_1_on_an_error_and_0_on_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _snapshot(tmp_path, [*rack("r1"), *rack("r1", prefix="r2")])
    assert main(["fleet", "validate", "--snapshot", str(broken), "-o", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["domains"] == {"GB200-NVL72": 1}
    assert [(f["kind"], f["severity"], len(f["nodes"])) for f in data["findings"]] == [("too-many-nodes", "error", 36)]
    short = tmp_path / "short"
    short.mkdir()
    assert main(["fleet", "validate", "--snapshot", str(_snapshot(short, rack("r1", trays=16)))]) == 0
    out = capsys.readouterr().out
    assert "trays-missing" in out and "0 errors, 1 warning in 1 GB200-NVL72 domain" in out


def test_kilter_fleet_validate_names_the_node_that_claims_another_racks_clique(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leaf = "fabric.topograph.run/tier-1"
    racks = [node(f"r{r}-t{t:02d}", labels={CLIQUE: f"r{r}", leaf: f"leaf-{r}"}) for r in (1, 2) for t in range(18)]
    racks[-1] = node("r2-t17", labels={CLIQUE: "r1", leaf: "leaf-2"})
    assert main(["fleet", "validate", "--snapshot", str(_snapshot(tmp_path, racks)), "-o", "json"]) == 1
    errors = [(f["kind"], f["domain"], f["nodes"]) for f in json.loads(capsys.readouterr().out)["findings"]]
    assert errors == [
        ("disputed-member", "r1", ["r2-t17"]),
        ("trays-missing", "r2", [f"r2-t{t:02d}" for t in range(17)]),
    ]


def test_the_report_names_the_domains_with_errors() -> None:
    report: Report = validate(
        [*rack("r1", trays=17), node("r1-t17", gpus=2, labels={CLIQUE: "r1"}), *rack("r2")], CATALOG
    )
    assert report.domains_with_errors() == frozenset({"r1"})


def test_an_acknowledged_domain_is_shown_but_no_longer_fails_and_an_unreadable_count_does() -> None:
    acked = [*rack("r1", trays=17), node("r1-t17", gpus=3, labels={CLIQUE: "r1", TOPOLOGY_ACK: "r1"})]
    report = validate(acked, CATALOG)
    assert [(f.kind, f.severity) for f in report.findings] == [("gpus-short", "warning")]
    assert f"acknowledged: {TOPOLOGY_ACK}=r1" in report.findings[0].message and not report.errors
    oversized = [*rack("r1"), node("r1-t18", labels={CLIQUE: "r1", TOPOLOGY_ACK: "r1"})]
    assert [(f.kind, f.severity) for f in validate(oversized, CATALOG).findings] == [("too-many-nodes", "error")]
    self_set = [*rack("r1", trays=17), node("r1-t17", gpus=3, labels={CLIQUE: "r1", UNPROTECTED_TOPOLOGY_ACK: "true"})]
    assert [(f.kind, f.severity) for f in validate(self_set, CATALOG).findings] == [
        ("gpus-short", "error"),
        ("ack-ignored", "warning"),
    ]
    broken = node("r2-t00", labels={CLIQUE: "r2"})
    broken_dict = msgspec.to_builtins(broken)
    broken_dict["status"]["allocatable"]["nvidia.com/gpu"] = "abc"
    odd = msgspec.convert(broken_dict, Node)
    (found,) = validate([odd], CATALOG).findings
    assert (found.kind, found.severity, found.nodes) == ("gpus-unreadable", "error", ("r2-t00",))
