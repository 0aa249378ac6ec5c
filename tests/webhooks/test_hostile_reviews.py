"""Reviews kube-apiserver could not have sent, or objects no one but kilter may write, over real HTTPS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extenders.conftest import cluster_objects
from tests.webhooks.conftest import Hooks, admission_review, start


@pytest.fixture
def hooks(tmp_path: Path) -> Iterator[Hooks]:
    yield from start(tmp_path, cluster_objects())


def deep_review(levels: int) -> bytes:
    """A well-formed AdmissionReview whose object nests ``levels`` deep: past the decoder's recursion limit."""
    head = (
        '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",'
        '"kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":'
    )
    return (head + '{"a":' * levels + "1" + "}" * levels + "}}").encode()


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_review_nested_too_deep_gets_400_with_one_line(hooks: Hooks, path: str) -> None:
    status, data = hooks.post(path, deep_review(1000))
    assert status == 400
    assert data == b"not an AdmissionReview: JSON nested too deep\n"
    answer = hooks.review(path, admission_review({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
    assert answer["response"]["allowed"] is True  # still serving
