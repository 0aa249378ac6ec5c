"""Reviews kube-apiserver could not have sent, or objects no one but kilter may write, over real HTTPS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    write_snapshot,
)
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


# ---------------------------------------------------------------------- one gang-size rule

BAD_GANG_SIZES = ["0", "-1", "abc", str(2**64), "1e3", " 4", "4 ", "+4", "100001", "²", "４", ""]


@pytest.fixture
def extender(tmp_path: Path) -> Iterator[Served]:
    snapshot = tmp_path / "extender-snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    app, store = build_app(serve_config(snapshot))
    with _Server(app, None) as port:
        yield Served(app, store, snapshot, port)


def gang_member(size: str, *, where: str = "labels") -> dict[str, Any]:
    pod = pod_json("g-0", 4, labels={"kilter.dev/gang": "g"})
    if where == "labels":
        pod["metadata"]["labels"]["kilter.dev/gang-size"] = size
    else:
        pod["metadata"]["annotations"] = {"kilter.dev/gang-size": size}
    return pod


@pytest.mark.parametrize("where", ["labels", "annotations"])
@pytest.mark.parametrize("size", BAD_GANG_SIZES)
def test_a_gang_size_the_webhook_denies_the_extender_refuses_with_the_same_words(
    hooks: Hooks, extender: Served, size: str, where: str
) -> None:
    pod = gang_member(size, where=where)
    answer = hooks.review("/validate", admission_review(pod))["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    status, result = extender.post("filter", names_args(pod, ["r1-t00"]))
    assert status == 200 and result["NodeNames"] is None
    words = f"label kilter.dev/gang-size must be a whole number from 1 to 100,000, got {size!r}"
    assert answer["status"]["message"] == words
    assert result["Error"] == words


@pytest.mark.parametrize("size", ["1", "4", "0004", "100000"])
def test_a_gang_size_the_webhook_allows_the_extender_plans(hooks: Hooks, extender: Served, size: str) -> None:
    pod = gang_member(size)
    assert hooks.review("/validate", admission_review(pod))["response"]["allowed"] is True
    status, result = extender.post("filter", names_args(pod, ["r1-t00"]))
    assert status == 200 and result["Error"] == ""
