"""The JSON fast path reads every snapshot exactly as the YAML path does, and refuses the same bad ones the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli import sources
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.state import cluster, feed, snapshot, snapshot_file, snapshot_json
from kilter.state.store import ClusterStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_QUEUES = REPO / "examples" / "queues" / "ai-platform.yaml"
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}, "data": {"a": "1"}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 2}}
PRIORITY = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "high"},
    "value": 1000,
    "globalDefault": False,
    "description": "serving",
    "preemptionPolicy": "PreemptLowerPriority",
}
ADMISSION_CHECK = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "AdmissionCheck",
    "metadata": {"name": "kilter"},
    "spec": {"controllerName": "kilter.dev/topology"},
    "status": {"conditions": [{"type": "Active", "status": "True"}]},
}
# A Pod of another API group with a shape no Pod has: counted, never typed
POD_METRICS = {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "Pod", "metadata": {"name": "m"}, "spec": 5}


def demo_objects() -> list[dict[str, Any]]:
    """The demo fleet (generated Nodes, Pods, Topology, the demo's queues) and examples/queues, as dicts."""
    objects = sources.demo_objects()
    objects += [doc for doc in yaml.safe_load_all(EXAMPLE_QUEUES.read_text()) if doc]
    assert all(isinstance(o, dict) for o in objects)
    return objects


def kubectl_json(path: Path, items: list[Any]) -> Path:
    """``items`` as ``kubectl get -o json`` prints them: a v1 List, four-space indents, keys sorted."""
    doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    path.write_text(json.dumps(doc, indent=4, sort_keys=True))
    return path


def as_yaml(path: Path, items: list[Any]) -> Path:
    path.write_text(yaml.safe_dump_all(items, sort_keys=False))
    return path


def assert_same_state(a: cluster.ClusterState, b: cluster.ClusterState) -> None:
    for name in cluster.TYPES:
        assert getattr(a, name) == getattr(b, name), name
    assert a.raw == b.raw
    assert a.warnings == b.warnings
    assert a.fleet().node_names == b.fleet().node_names
    assert a.fleet().warnings == b.fleet().warnings


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([], id="known kinds only: one pass"),
        pytest.param([CONFIG_MAP, DEPLOYMENT, POD_METRICS], id="unknown kinds: item by item"),
        pytest.param([PRIORITY, ADMISSION_CHECK], id="kinds kept as received"),
    ],
)
def test_the_demo_fleet_and_example_queues_give_the_same_state_from_json_and_yaml(
    tmp_path: Path, extra: list[dict[str, Any]]
) -> None:
    objects = demo_objects() + extra
    from_json = cluster.load(kubectl_json(tmp_path / "s.json", objects))
    from_yaml = cluster.load(as_yaml(tmp_path / "s.yaml", objects))
    assert len(from_json.pods) > 100 and from_json.cluster_queues and from_json.workloads
    assert_same_state(from_json, from_yaml)


def test_a_bare_array_a_nested_list_and_nulls_read_as_yaml_reads_them(tmp_path: Path) -> None:
    objects = demo_objects()
    nested = [None, objects[:10], {"apiVersion": "v1", "kind": "PodList", "items": objects[10:]}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(nested))
    assert_same_state(cluster.load(path), cluster.load(as_yaml(tmp_path / "s.yaml", [nested])))


def test_one_object_alone_is_read(tmp_path: Path) -> None:
    pod = next(o for o in demo_objects() if o["kind"] == "Pod")
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod))
    assert [p.metadata.name for p in cluster.load(path).pods] == [pod["metadata"]["name"]]


def test_yaml_in_flow_style_is_still_yaml(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text("{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, metadata: {name: p}}]}\n")
    assert [p.metadata.name for p in cluster.load(path).pods] == ["p"]


def json_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        cluster.load(path)
    return str(err.value)


def yaml_error(tmp_path: Path, text: str) -> str:
    """The error the YAML path gives for this JSON (read as YAML: JSON is YAML)."""
    docs = [yaml.safe_load(text)]
    with pytest.raises(InputError) as err:
        cluster.from_objects(docs)
    return str(err.value)


LIST = '{"apiVersion": "v1", "kind": "List", "items": %s}'


@pytest.mark.parametrize(
    "items",
    [
        pytest.param('[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 5}}]', id="wrong type in a Pod"),
        pytest.param('[{"apiVersion": "v1", "kind": "Node", "spec": {"taints": "x"}}]', id="wrong type in a Node"),
        pytest.param('[{"apiVersion": "v1", "kind": "Pod"}, 7]', id="an item that is no object"),
        pytest.param('[{"apiVersion": "v1", "kind": "Pod"}, "text"]', id="an item that is a string"),
        pytest.param('[{"metadata": {"name": "x"}}]', id="an item without kind"),
        pytest.param('[{"kind": "Pod", "metadata": {"name": "x"}}]', id="an item without apiVersion"),
        pytest.param('[{"apiVersion": 3, "kind": "Pod"}]', id="apiVersion not a string"),
        pytest.param("5", id="items not a list"),
        pytest.param("null", id="items null"),
        pytest.param(
            '[{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"}, '
            '"spec": {"resourceGroups": 4}}]',
            id="wrong type in a ClusterQueue",
        ),
    ],
)
def test_bad_json_objects_fail_with_the_yaml_paths_one_line_error(tmp_path: Path, items: str) -> None:
    text = LIST % items
    message = json_error(tmp_path, text)
    assert message == yaml_error(tmp_path, text)
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param(LIST % '[{"apiVersion": "v1", "kind": "Pod"', "not valid YAML or JSON", id="truncated"),
        pytest.param('{"apiVersion": "v1",, "kind": "List"}', "not valid YAML or JSON", id="malformed"),
    ],
)
def test_malformed_json_is_one_line(tmp_path: Path, text: str, words: str) -> None:
    message = json_error(tmp_path, text)
    assert words in message and "\n" not in message


def test_malformed_json_too_large_to_be_yaml_gets_msgspecs_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_file, "YAML_RETRY_BYTES", 10)
    message = json_error(tmp_path, LIST % '[{"apiVersion": "v1", "kind": "Pod"')
    assert message.endswith("is not valid YAML or JSON: Input data was truncated")


def test_a_snapshot_over_the_limit_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = LIST % json.dumps(demo_objects()[:3])
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_BYTES", 100)
    message = json_error(tmp_path, text)
    assert "the limit is 100" in message


def test_an_empty_file_is_an_empty_state(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    assert cluster.load(path).nodes == []


def test_not_strict_a_pod_that_does_not_type_stays_a_dict_for_the_store_to_leave_out(tmp_path: Path) -> None:
    objects = demo_objects()
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "n"}, "spec": {"containers": 1}}
    path = kubectl_json(tmp_path / "s.json", [*objects, bad])
    typed, raw = snapshot_file.read(path, cluster.KNOWN_KINDS, strict=False)
    assert raw.of("", "Pod") == [bad]
    assert all(isinstance(p, Pod) for p in typed if p.kind == "Pod")
    store = ClusterStore()
    feed.SnapshotFeed(path, store).load()
    assert store.pod_named("n", "bad") is None
    assert any("Pod n/bad left out" in why for why in store.unreadable())
    assert len(store.state().pods) == len(cluster.load(as_yaml(tmp_path / "s.yaml", objects)).pods)


def test_the_snapshot_feed_holds_the_same_objects_from_json_and_from_yaml(tmp_path: Path) -> None:
    objects = [*demo_objects(), CONFIG_MAP]
    stores = []
    for path in (kubectl_json(tmp_path / "s.json", objects), as_yaml(tmp_path / "s.yaml", objects)):
        store = ClusterStore()
        feed.SnapshotFeed(path, store).load()
        stores.append(store)
    a, b = (s.state() for s in stores)
    for name in cluster.TYPES:
        assert getattr(a, name) == getattr(b, name), name
    assert a.raw.by_kind == b.raw.by_kind


def test_looks_like_json_reads_only_the_first_bytes() -> None:
    assert snapshot_json.looks_like_json(b"  \n {") and snapshot_json.looks_like_json(b"[")
    assert not snapshot_json.looks_like_json(b"apiVersion: v1\n") and not snapshot_json.looks_like_json(b"")


def test_what_kubectl_prints_for_the_known_kinds_is_read_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubectl_json(tmp_path / "s.json", [*demo_objects(), PRIORITY, ADMISSION_CHECK])
    expected = cluster.load(path)

    def no_second_pass(*args: object) -> None:
        raise AssertionError("read item by item")

    monkeypatch.setattr(snapshot_json, "_items", no_second_pass)
    assert_same_state(cluster.load(path), expected)
    kubectl_json(tmp_path / "s.json", [*demo_objects(), CONFIG_MAP])
    with pytest.raises(AssertionError, match="item by item"):
        cluster.load(path)


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_skipped_kinds_are_left_out_unread_and_the_rest_is_the_same(tmp_path: Path, form: str) -> None:
    objects = [*demo_objects(), CONFIG_MAP]
    write_file = kubectl_json if form == "json" else as_yaml
    path = write_file(tmp_path / f"s.{form}", objects)
    full = cluster.load(path)
    quota_only = cluster.load(path, skip=cluster.NODES_AND_PODS)
    assert quota_only.nodes == [] and quota_only.pods == []
    for name in ("cluster_queues", "cohorts", "local_queues", "workloads", "flavors", "topologies"):
        assert getattr(quota_only, name) == getattr(full, name), name
    assert quota_only.raw == full.raw
    assert quota_only.warnings == ["ignored 1 v1/ConfigMap object(s)"]
    with pytest.raises(RuntimeError, match="without Nodes or Pods"):
        quota_only.fleet()


def test_a_skipped_kind_is_not_checked(tmp_path: Path) -> None:
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 5}}
    path = kubectl_json(tmp_path / "s.json", [*demo_objects(), bad])
    with pytest.raises(InputError):
        cluster.load(path)
    assert cluster.load(path, skip=cluster.NODES_AND_PODS).workloads


def test_json_nested_past_the_recursion_limit_is_an_input_error(tmp_path: Path) -> None:
    message = json_error(tmp_path, "[" * 5000 + "]" * 5000)
    assert message == "JSON nested too deep"
