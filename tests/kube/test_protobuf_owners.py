"""A pod's ownerReferences read the same from protobuf as from JSON, and a job's pods share one decoded tuple."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.kube import protobuf
from kilter.model.core_v1 import OwnerReference, Pod
from tests.kube_protobuf import encode, envelope

Json = dict[str, Any]

JOB_REF: Json = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid", "controller": True}


def pb_views(items: list[Json]) -> list[Pod]:
    body = encode({"metadata": {"resourceVersion": "7"}, "items": items}, "PodList")
    page = protobuf.decode_page(protobuf.Decoder(), Pod, envelope(body, "v1", "PodList"))
    assert page.skipped == []
    return page.items


def json_views(items: list[Json]) -> list[Pod]:
    return [msgspec.json.decode(msgspec.json.encode(obj), type=Pod) for obj in items]


def test_a_controller_reference_reads_as_upstream_spells_it() -> None:
    pod = {"metadata": {"name": "w-0", "ownerReferences": [JOB_REF]}}
    (view,) = pb_views([pod])
    assert view.metadata.owner_references == (OwnerReference("batch/v1", "Job", "train", "job-uid", True),)
    assert view.metadata.controller == view.metadata.owner_references[0]
    assert view == json_views([pod])[0]


def test_an_owner_without_controller_true_is_no_controller() -> None:
    refs = [{**JOB_REF, "controller": False}, {k: v for k, v in JOB_REF.items() if k != "controller"}]
    pods = [{"metadata": {"name": "p", "ownerReferences": refs}}]
    (view,) = pb_views(pods)
    assert [r.controller for r in view.metadata.owner_references] == [False, None]
    assert view.metadata.controller is None
    assert pb_views(pods) == json_views(pods)


def test_a_pod_without_owners_has_an_empty_tuple() -> None:
    (view,) = pb_views([{"metadata": {"name": "bare"}}])
    assert view.metadata.owner_references == () and view.metadata.controller is None


def test_the_pods_of_one_job_share_one_tuple_of_owners() -> None:
    pods = [{"metadata": {"name": f"w-{i}", "ownerReferences": [JOB_REF]}} for i in range(4)]
    views = pb_views(pods)
    assert all(v.metadata.owner_references is views[0].metadata.owner_references for v in views)


names = st.text(st.sampled_from("abcxyz-./"), min_size=1, max_size=8)
owner = st.fixed_dictionaries(
    {"apiVersion": st.sampled_from(["batch/v1", "apps/v1", "batch.volcano.sh/v1alpha1", ""]), "kind": names},
    optional={"name": names, "uid": names, "controller": st.booleans(), "blockOwnerDeletion": st.booleans()},
)
pod = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": names}, optional={"ownerReferences": st.lists(owner, max_size=3)})}
)


@settings(max_examples=100, deadline=None)
@given(st.lists(pod, max_size=4))
def test_any_owner_references_decode_as_from_json(pods: list[Json]) -> None:
    assert pb_views(pods) == json_views(pods)
