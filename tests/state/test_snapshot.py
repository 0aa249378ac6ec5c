"""Snapshot files in every shape kubectl prints, and clear errors for the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kilter.model.errors import InputError
from kilter.state import cluster
from tests.topology.builders import node_dict


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "snap"
    path.write_text(text)
    return path


def test_a_v1_list_in_json(tmp_path: Path) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [node_dict("a", labels={"nvidia.com/gpu.clique": "r"})],
    }
    state = cluster.load(write(tmp_path, json.dumps(doc)))
    assert [n.metadata.name for n in state.nodes] == ["a"]
    assert state.fleet().node_names == ["a"]


def test_multi_document_yaml_with_empty_documents_and_nested_lists(tmp_path: Path) -> None:
    text = (
        "---\n"
        "apiVersion: v1\nkind: Node\nmetadata: {name: a}\nstatus: {allocatable: {nvidia.com/gpu: '8'}}\n"
        "---\n"
        "---\n"
        "apiVersion: v1\nkind: PodList\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n"
        "---\n"
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nmetadata: {name: t}\n"
        "spec: {levels: [{nodeLabel: kubernetes.io/hostname}]}\n"
        "---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
    )
    state = cluster.load(write(tmp_path, text))
    assert len(state.nodes) == 1 and len(state.pods) == 1 and len(state.topologies) == 1
    assert state.warnings == ["ignored 1 apps/v1, Deployment object(s)"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("kind: [\n", "not valid YAML", id="malformed YAML"),
        pytest.param("- 1\n- 2\n", "expected a Kubernetes object", id="a list of numbers"),
        pytest.param("metadata: {name: x}\n", "without apiVersion and kind", id="no kind"),
        pytest.param("apiVersion: v1\nkind: List\nitems: 5\n", "items must be a list", id="items not a list"),
        pytest.param("apiVersion: v1\nkind: Node\nmetadata: {name: 5}\n", "Expected `str`", id="wrong type in a Node"),
    ],
)
def test_bad_snapshots_are_input_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        cluster.load(write(tmp_path, text))


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        cluster.load(tmp_path / "nope.yaml")


def test_a_binary_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bin"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="UTF-8"):
        cluster.load(path)
