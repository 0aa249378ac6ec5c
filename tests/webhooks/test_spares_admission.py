"""The validating webhook over real HTTPS on ``kilter.dev/spare-nodes-per-domain``: a count that is no whole
number, or more nodes than a domain of what the object reaches holds, is refused on a ResourceFlavor, a
ClusterQueue or a Cohort; a fitting one is allowed.

The fleet (``tests.extenders.conftest.cluster_objects``): two GB200 NVL72 racks (18 trays a domain) and an
MI355X node. The ResourceFlavor ``gb200`` selects the GB200 nodes; ClusterQueue ``training`` in Cohort ``org``
has quota for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extenders.conftest import cluster_objects
from tests.webhooks.conftest import Hooks, admission_review, start

KEY = "kilter.dev/spare-nodes-per-domain"
LEND = "kilter.dev/spares-for-preemptible"
API = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


def flavor(name: str, labels: dict[str, str], notes: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "annotations": notes or {}},
        "spec": {"nodeLabels": labels},
    }


def queue(notes: dict[str, str] | None = None) -> dict[str, Any]:
    quota = {"name": "gb200", "resources": [{"name": GPU, "nominalQuota": "64"}]}
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": "training", "annotations": notes or {}},
        "spec": {"cohortName": "org", "resourceGroups": [{"coveredResources": [GPU], "flavors": [quota]}]},
    }


def cohort(notes: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Cohort", "metadata": {"name": "org", "annotations": notes or {}}, "spec": {}}


GB200 = {"nvidia.com/gpu.product": "NVIDIA-GB200"}


@pytest.fixture(params=["snapshot", "live"])
def hooks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hooks]:
    kueue = [flavor("gb200", GB200), queue(), cohort()]
    yield from start(tmp_path, [*cluster_objects(), *kueue], mode=request.param)


def validate(hooks: Hooks, obj: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = hooks.review("/validate", admission_review(obj))["response"]
    return response


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(flavor("gb200", GB200, {KEY: "2"}), id="ResourceFlavor 2"),
        pytest.param(flavor("gb200", GB200, {KEY: "18"}), id="ResourceFlavor 18: a whole rack"),
        pytest.param(queue({KEY: "0"}), id="ClusterQueue 0"),
        pytest.param(cohort({KEY: "4"}), id="Cohort 4"),
        pytest.param(flavor("gb200", GB200, {KEY: "2", LEND: "true"}), id="ResourceFlavor lends its spares"),
        pytest.param(queue({LEND: "false"}), id="ClusterQueue keeps them"),
        pytest.param(cohort({LEND: "true"}), id="Cohort lends"),
    ],
)
def test_a_count_within_the_domains_it_reaches_is_allowed(hooks: Hooks, obj: dict[str, Any]) -> None:
    assert validate(hooks, obj)["allowed"] is True


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(
            flavor("gb200", GB200, {KEY: "19"}),
            f"ResourceFlavor gb200: {KEY} must be a whole number from 0 to 18, got '19'",
            id="ResourceFlavor 19 > 18 trays",
        ),
        pytest.param(
            queue({KEY: "-1"}),
            f"ClusterQueue training: {KEY} must be a whole number from 0 to 18, got '-1'",
            id="ClusterQueue negative",
        ),
        pytest.param(
            cohort({KEY: "two"}),
            f"Cohort org: {KEY} must be a whole number from 0 to 18, got 'two'",
            id="Cohort not a number",
        ),
        pytest.param(
            flavor("elsewhere", {"pool": "none"}, {KEY: "100"}),
            f"ResourceFlavor elsewhere: {KEY} must be a whole number from 0 to 72, got '100'",
            id="a flavor of no node: the catalog's largest domain bounds it",
        ),
        pytest.param(
            flavor("gb200", GB200, {KEY: "2", LEND: "yes"}),
            f"""ResourceFlavor gb200: {LEND} must be "true" or "false", got 'yes'""",
            id="ResourceFlavor lending yes",
        ),
        pytest.param(
            queue({LEND: "True"}),
            f"""ClusterQueue training: {LEND} must be "true" or "false", got 'True'""",
            id="ClusterQueue lending True",
        ),
        pytest.param(
            flavor("gb200", GB200, {"kilter.dev/spares": "2"}),
            "unknown annotation kilter.dev/spares: kilter reads kilter.dev/spare-nodes-per-domain, "
            "kilter.dev/spares-for-preemptible on a ResourceFlavor",
            id="a misspelt key",
        ),
    ],
)
def test_a_bad_count_is_refused_with_what_to_write(hooks: Hooks, obj: dict[str, Any], message: str) -> None:
    response = validate(hooks, obj)
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert message in response["status"]["message"], response["status"]["message"]
