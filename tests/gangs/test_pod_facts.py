"""A member's GPU ask and index are read once per pod object, and read again as soon as the object is another."""

from __future__ import annotations

import msgspec
import pytest

from kilter.gangs import pod_facts, ranks
from kilter.model import codec
from kilter.model.core_v1 import Pod
from tests.extenders.conftest import pod_json

RESOURCES = ("amd.com/gpu", "nvidia.com/gpu")
INDEX = "batch.kubernetes.io/job-completion-index"


def pod(gpus: int, index: int) -> Pod:
    return codec.convert(pod_json("train-0", gpus, annotations={INDEX: str(index)}), Pod)


def test_the_same_object_answers_from_the_memo_and_a_replaced_object_is_read_again() -> None:
    first = pod(4, 3)
    assert pod_facts.gpu_ask(first, RESOURCES) == ("nvidia.com/gpu", 4)
    assert pod_facts.index_of(first) == ranks.read_index(first)
    # The store replaces the object when the pod changes; same UID, another object: nothing stale is answered.
    second = pod(8, 5)
    assert pod_facts.gpu_ask(second, RESOURCES) == ("nvidia.com/gpu", 8)
    found = pod_facts.index_of(second)
    assert isinstance(found, ranks.PodIndex) and found.index == 5


def test_the_memo_is_kept_with_the_object_not_its_content() -> None:
    held = pod(4, 1)
    assert pod_facts.gpu_ask(held, RESOURCES) == ("nvidia.com/gpu", 4)
    twin = msgspec.structs.replace(held)  # equal content, another object: read afresh (and the same answer)
    assert twin is not held and pod_facts.gpu_ask(twin, RESOURCES) == ("nvidia.com/gpu", 4)
    assert pod_facts.gpu_ask(held, ("amd.com/gpu",)) == ("", 0)  # other resources asked: not the remembered answer


def test_the_memo_starts_afresh_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_facts, "MAX_PODS", 3)
    pod_facts.forget()
    pods = [codec.convert(pod_json(f"p-{i}", 4), Pod) for i in range(5)]
    for p in pods:
        pod_facts.gpu_ask(p, RESOURCES)
    assert len(pod_facts._asks) <= 3
