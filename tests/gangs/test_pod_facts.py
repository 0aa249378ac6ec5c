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
    assert isinstance(found, ranks.RankLabel) and found.index == 5


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


def test_a_rank_is_read_again_for_another_object_other_gpus_or_other_shapes() -> None:
    shapes = (ranks.Shape("pods", 8, 4),)
    first = pod(4, 3)
    assert pod_facts.place_of(first, 4, shapes) == ranks.Place("pods", 3)
    assert pod_facts.place_of(pod(4, 5), 4, shapes) == ranks.Place("pods", 5)  # the pod changed
    small = (ranks.Shape("pods", 4, 4),)
    assert isinstance(pod_facts.place_of(first, 4, small), ranks.Place)  # rank 3 of 4: still inside
    assert isinstance(pod_facts.place_of(pod(4, 6), 4, small), str)  # rank 6 of 4 pods: why not, not a place
    assert isinstance(pod_facts.place_of(first, 2, shapes), str)  # asks 2 GPUs, the pod set has 4


def test_a_record_time_is_read_once_per_object() -> None:
    calls: list[str] = []

    def read(raw: str) -> float:
        calls.append(raw)
        return float(len(raw))

    plain = pod(4, 1)
    assert pod_facts.record_time(plain, read) == (None, None) and calls == []  # no record: nothing read
    noted = codec.convert(pod_json("r", 4, annotations={"kilter.dev/plan": "xyz"}), Pod)
    assert pod_facts.record_time(noted, read) == ("xyz", 3.0)
    assert pod_facts.record_time(noted, read) == ("xyz", 3.0) and calls == ["xyz"]
    again = codec.convert(pod_json("r", 4, annotations={"kilter.dev/plan": "wxyz"}), Pod)
    assert pod_facts.record_time(again, read) == ("wxyz", 4.0) and calls == ["xyz", "wxyz"]


def test_a_members_facts_and_the_rank_it_holds_are_read_again_for_another_object_resources_or_shapes() -> None:
    shapes = (ranks.Shape("pods", 8, 4),)
    bound = codec.convert(pod_json("train-3", 4, node="r1-t03", annotations={INDEX: "3"}), Pod)
    assert pod_facts.member(bound, RESOURCES) == ("nvidia.com/gpu", 4, "")
    assert pod_facts.member(bound, ("amd.com/gpu",)) == ("", 0, "")  # other resources asked: read again
    gpus, taken = pod_facts.held(bound, RESOURCES, shapes)
    assert gpus == 4 and taken == ranks.Taken(ranks.Place("pods", 3), "r1-t03", 4, "uid-train-3")
    assert pod_facts.held(bound, RESOURCES, shapes)[1] is taken  # remembered
    assert isinstance(pod_facts.held(bound, RESOURCES, (ranks.Shape("pods", 2, 4),))[1], str)  # rank 3 of 2 pods
    moved = codec.convert(pod_json("train-3", 4, node="r1-t09", annotations={INDEX: "5"}), Pod)
    now = ranks.Taken(ranks.Place("pods", 5), "r1-t09", 4, "uid-train-3")
    assert pod_facts.held(moved, RESOURCES, shapes)[1] == now
    pod_facts.forget(places_only=True)
    assert pod_facts.held(bound, RESOURCES, shapes)[1] is not taken  # ranks forgotten: read afresh, the same
    assert pod_facts.held(bound, RESOURCES, shapes)[1] == taken


def test_a_bound_member_whose_gpu_count_does_not_read_holds_gpus_in_no_known_rank() -> None:
    """Its node counts as full (``topology.pod_gpus``), so it is a GPU pod, not a pod of none: the layout must not
    offer its rank to another pod as free (``layout._holds`` reads GPUs other than 0 without a rank as unknown)."""
    raw = pod_json("train-3", 4, node="r1-t03", annotations={INDEX: "3"})
    raw["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "abc"
    raw["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "abc"
    bound = codec.convert(raw, Pod)
    assert pod_facts.gpu_ask(bound, RESOURCES) == (pod_facts.UNREAD, 0)
    gpus, place = pod_facts.held(bound, RESOURCES, (ranks.Shape("pods", 8, 4),))
    assert gpus is None and place == "its GPU ask cannot be read"
