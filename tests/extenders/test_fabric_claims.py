"""A node that relabels itself onto another rack's NVLink fabric, over a real ``kilter serve`` (issue #37).

Two GB200 NVL72 racks labelled as GPU Feature Discovery labels them (clique
``<cluster UUID>.<clique ID>`` and IMEX domain), one leaf above both. Tray
r2-t17 (its kubelet, or an agent on it) sets rack 1's clique on its own
Node, as NodeRestriction lets it. Served from a snapshot file and from a
live cluster kilter lists and watches; gangs ask for one domain as Kueue's
``podset-required-topology`` says it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from kilter.model.annotations import TOPOLOGY_ACK, UNPROTECTED_TOPOLOGY_ACK
from kilter.model.jobs import ANNOTATION_REQUIRED
from kilter.topology.validate import IMEX_DOMAIN
from tests.extenders.conftest import Served, names_args, pod_json
from tests.extenders.test_compute_domains_http import serving
from tests.state.test_feed_faults import until
from tests.topology.builders import CLIQUE, TIER1, node_dict

MODES = pytest.mark.parametrize("mode", ["snapshot", "live"])
FABRIC = {
    r: {
        CLIQUE: f"5d3e4e5c-86c5-4a8f-9e24-6c3c1a7f000{r}.32766",
        IMEX_DOMAIN: f"0c9e2b7a-d1f0-4c55-a5f4-3e8b9f6d000{r}.1",
    }
    for r in (1, 2)
}
R1 = FABRIC[1][CLIQUE]
NODES = [f"r{r}-t{t:02d}" for r in (1, 2) for t in range(18)]


def tray(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return node_dict(name, labels={**labels, TIER1: "leaf-a"})


def racks(**r2_t17: str) -> list[dict[str, Any]]:
    """Both racks, r2-t17's labels replaced by rack 2's with ``r2_t17`` over them, and the pending pods of two
    gangs that must each share one NVLink domain: 18 and 19 pods of 4 GPUs (a gang whose pods the state holds is
    planned whole; one it does not is held to half the fleet)."""
    out = [tray(n, FABRIC[int(n[1])]) for n in NODES]
    out[-1] = tray("r2-t17", {**FABRIC[2], **r2_t17})
    return out + [one_domain_pod(size, i) for size in (18, 19) for i in range(size)]


def one_domain_pod(size: int, i: int) -> dict[str, Any]:
    """Pod ``i`` of a gang of ``size`` 4-GPU pods that must share one NVLink domain."""
    labels = {"kilter.dev/gang": f"train-{size}", "kilter.dev/gang-size": str(size)}
    return pod_json(f"train-{size}-{i}", 4, labels=labels, annotations={ANNOTATION_REQUIRED: CLIQUE})


def planned(served: Served, size: int) -> list[str]:
    """The nodes the gang's plan holds for its pods (none while it does not fit)."""
    status, result = served.post("filter", names_args(one_domain_pod(size, 0), NODES))
    assert status == 200 and result["Error"] == "", result
    return sorted(result["NodeNames"] or [])


def problems(served: Served) -> list[str]:
    """``/readyz``'s problems: its lines after "ok", or with a live feed its JSON's ``problems``."""
    status, body, _ = served.call("GET", "/readyz")
    assert status == 200, body
    if served.cluster is not None:
        found: list[str] = json.loads(body)["problems"]
        return found
    lines = body.decode().splitlines()
    assert lines[0] == "ok", lines
    return lines[1:]


def says(served: Served, words: str) -> bool:
    return any(words in line for line in problems(served))


@MODES
def test_a_node_claiming_another_racks_clique_is_detached_alone_and_named_and_rack_1_takes_an_18x4_gang(
    mode: str, tmp_path: Path
) -> None:
    with serving(mode, tmp_path, racks()) as served:
        assert problems(served) == []
        served.replace(racks(**{CLIQUE: R1}))
        until("r2-t17 relabelled", functools.partial(claims_r1, served))
        assert planned(served, 18) == [f"r1-t{t:02d}" for t in range(18)], "rack 1's 18 trays are still one domain"
        assert planned(served, 19) == [], "r2-t17 is on no fabric with them"
        [line] = problems(served)
        assert line.startswith(f"domain {R1}: node r2-t17 claims domain {R1}") and "detached alone" in line
        assert f"{IMEX_DOMAIN}={FABRIC[2][IMEX_DOMAIN]} where they have {FABRIC[1][IMEX_DOMAIN]}" in line


def claims_r1(served: Served) -> bool:
    fleet = served.store.fleet()
    return fleet.node_labels[fleet.node_index["r2-t17"]].get(CLIQUE) == R1


@MODES
def test_an_acknowledgement_a_node_sets_on_itself_does_not_put_it_on_a_fabric(mode: str, tmp_path: Path) -> None:
    """r2-t17 copies every label of rack 1 (so nothing tells it apart) and acknowledges the domain itself."""
    forged = racks(**FABRIC[1], **{UNPROTECTED_TOPOLOGY_ACK: "true"})
    with serving(mode, tmp_path, forged) as served:
        assert planned(served, 19) == [], "19 trays under one clique are no NVL72 domain, whoever says so"
        assert says(served, f"domain {R1}: domain {R1} has 19 nodes")
        assert says(served, f"{UNPROTECTED_TOPOLOGY_ACK} on r2-t17 acknowledges nothing")
        acked = list(forged)
        acked[0] = tray("r1-t00", {**FABRIC[1], TOPOLOGY_ACK: R1})  # a person's acknowledgement, on rack 1
        served.replace(acked)
        until("the acknowledgement seen", functools.partial(acknowledged, served))
        assert planned(served, 19) == [], "more trays than an NVL72 connects are never acknowledged"
        assert planned(served, 18) == [], "rack 1's label stays split; rack 2 holds 17 trays"


def acknowledged(served: Served) -> bool:
    fleet = served.store.fleet()
    return fleet.node_labels[fleet.node_index["r1-t00"]].get(TOPOLOGY_ACK) == R1
