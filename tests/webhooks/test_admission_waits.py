"""The validating webhook refuses split-wait and expected-runtime annotations scheduling could not read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extenders.conftest import cluster_objects
from tests.webhooks.conftest import Hooks, admission_review, start
from tests.webhooks.test_admission import cq, job, verdict


@pytest.fixture
def hooks(tmp_path: Path) -> Iterator[Hooks]:
    yield from start(tmp_path, cluster_objects())


def denied(hooks: Hooks, obj: dict[str, object]) -> str:
    response = verdict(hooks, "/validate", admission_review(obj))
    assert response["allowed"] is False and response["status"]["code"] == 422
    message: str = response["status"]["message"]
    return message


def test_queues_may_carry_the_split_wait_annotations_when_they_read(hooks: Hooks) -> None:
    good = cq("q", {"kilter.dev/split-wait": "0.5", "kilter.dev/split-wait-max": "2h"})
    assert verdict(hooks, "/validate", admission_review(good))["allowed"] is True
    cohort = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "c"}, "spec": {}}
    cohort["metadata"]["annotations"] = {"kilter.dev/split-wait": "0"}  # type: ignore[index]
    assert verdict(hooks, "/validate", admission_review(cohort))["allowed"] is True
    assert "kilter.dev/split-wait: 'often' is not a number" in denied(
        hooks, cq("q", {"kilter.dev/split-wait": "often"})
    )
    assert "'1 day' is not a duration" in denied(hooks, cq("q", {"kilter.dev/split-wait-max": "1 day"}))


def test_jobs_and_their_pod_templates_are_checked_as_scheduling_reads_them(hooks: Hooks) -> None:
    ok = job(4, annotations={"kilter.dev/split-wait": "2"}, template_annotations={"kilter.dev/expected-runtime": "6h"})
    assert verdict(hooks, "/validate", admission_review(ok))["allowed"] is True
    message = denied(hooks, job(4, annotations={"kilter.dev/split-wait": "-1"}))
    assert "kilter.dev/split-wait: '-1' is not a number from 0 to 100" in message
    message = denied(hooks, job(4, template_annotations={"kilter.dev/expected-runtime": "0s"}))
    assert "kilter.dev/expected-runtime must be longer than 0s" in message and "$.spec.template" in message
    message = denied(hooks, job(4, template_annotations={"kilter.dev/split-wait-max": "forever"}))
    assert "'forever' is not a duration" in message
