"""Gang keys: one type that builds and splits the ``NAMESPACE/KIND/NAME`` text every record and log carries."""

from __future__ import annotations

import pytest

from kilter.gangs import records
from kilter.gangs.identity import GangKey, in_gang
from kilter.model.errors import InputError


@pytest.mark.parametrize(
    ("text", "key"),
    [
        pytest.param("ml/gang/train", GangKey("ml", "gang", ("train",)), id="kilter.dev/gang labels"),
        pytest.param("ml/podgroup/pg", GangKey("ml", "podgroup", ("pg",)), id="a Volcano PodGroup"),
        pytest.param("ml/workload/wl", GangKey("ml", "workload", ("wl",)), id="a Kueue Workload"),
        pytest.param("ml/lws/infer/2", GangKey("ml", "lws", ("infer", "2")), id="a LeaderWorkerSet group: two parts"),
        pytest.param("ml/jobset/x", GangKey("ml", "jobset", ("x",)), id="a JobSet"),
        pytest.param("ml/kubeflow/x", GangKey("ml", "kubeflow", ("x",)), id="a Kubeflow job"),
        pytest.param("ml/pod-group/x", GangKey("ml", "pod-group", ("x",)), id="a Kueue pod group"),
        pytest.param("ml/gang/", GangKey("ml", "gang", ("",)), id="an empty label value is a name"),
    ],
)
def test_a_key_parses_into_its_parts_and_formats_back_to_the_same_text(text: str, key: GangKey) -> None:
    assert GangKey.parse(text) == key
    assert key.format() == str(key) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("ml", id="a namespace alone"),
        pytest.param("ml/gang", id="no name"),
        pytest.param("ml/cronjob/x", id="a kind kilter does not know"),
        pytest.param("ml/gang/a/b", id="a gang name with a slash"),
        pytest.param("ml/lws/infer", id="an lws key without its group"),
    ],
)
def test_a_malformed_key_is_bad_input(text: str) -> None:
    with pytest.raises(InputError):
        GangKey.parse(text)


def test_a_malformed_key_selects_no_pods_and_has_no_owner() -> None:
    assert in_gang("ml/cronjob/x").nothing
    assert records.owner_of("ml/workload/a/b") is None


def test_the_owner_of_a_record_comes_from_the_keys_kind() -> None:
    assert records.owner_of(GangKey("ml", "podgroup", ("pg",))) == ("scheduling.volcano.sh", "PodGroup", "ml", "pg")
    assert records.owner_of("ml/workload/wl") == ("kueue.x-k8s.io", "Workload", "ml", "wl")
    assert records.owner_of("ml/gang/train") is None


def test_keys_order_by_namespace_then_kind_then_name() -> None:
    keys = [GangKey.parse(t) for t in ("ml/workload/b", "a/gang/z", "ml/gang/c", "ml/gang/a")]
    assert [str(k) for k in sorted(keys)] == ["a/gang/z", "ml/gang/a", "ml/gang/c", "ml/workload/b"]
