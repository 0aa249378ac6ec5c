"""Unknown hardware is said once per name or product, with what kilter does with it and how to describe it."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from kilter.cli.main import main
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import build_fleet
from kilter.topology.validate import validate
from tests.topology.builders import CLIQUE, node, rack

FUTURE = [
    node(f"r{r}-t{t:02d}", product="NVIDIA-GB400-FUTURE", labels={CLIQUE: f"r{r}"}) for r in (1, 2) for t in range(18)
]
LABELLED = [node(f"x{i}", labels={"kilter.dev/platform": "TPU-v9"}) for i in range(3)]
PCIE = [node(f"l40-{i}", product="NVIDIA-L40S", gpus=8) for i in range(2)]


def test_the_fleet_warns_once_per_unknown_name_and_product() -> None:
    fleet = build_fleet([*FUTURE, *LABELLED, *PCIE, *rack("ok", 18)])
    unknown = [w for w in fleet.warnings if "platforms file" in w]
    assert len(unknown) == 3
    tpu, future, l40 = unknown
    assert future.startswith(
        "36 nodes report nvidia.com/gpu.product=NVIDIA-GB400-FUTURE, which no catalog platform matches: read as "
        "NVIDIA-GPU, each node its own scale-up domain; their scale-up domain labels are not read"
    )
    assert l40.startswith("2 nodes report nvidia.com/gpu.product=NVIDIA-L40S") and "domain labels" not in l40
    assert tpu.startswith("3 nodes labelled kilter.dev/platform=TPU-v9: unknown platform 'TPU-v9'; known: ")
    assert all(w.endswith("(describe it in a platforms file, --platforms)") for w in unknown)
    assert not any(n.startswith("x") for n in fleet.node_names)  # a name nobody knows: left out
    assert "r1-t00" in fleet.node_names  # an unknown product: read as the generic platform


def test_validate_has_one_finding_per_unknown_group_instead_of_one_per_node() -> None:
    report = validate([*FUTURE, *LABELLED, *PCIE], Catalog(BUILTIN))
    found = [(f.kind, f.severity, len(f.nodes)) for f in report.findings]
    assert found == [
        ("unknown-platform", "error", 3),
        ("unknown-product", "error", 36),  # its NVLink clique labels are not read
        ("unknown-product", "warning", 2),  # a plain PCIe product: no domain labels lost
    ]
    assert report.domains == {}


def test_fleet_validate_prints_one_line_per_group_and_a_summary_that_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "nodes.json"
    items = [msgspec.to_builtins(n) for n in [*FUTURE, *LABELLED, *rack("ok", 18)]]
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["fleet", "validate", "--snapshot", str(snapshot)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + 2 + 2  # header, two findings, a blank line, the summary
    assert lines[-1] == "2 errors, 0 warnings in 1 GB200-NVL72 domain"
