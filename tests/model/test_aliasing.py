"""YAML aliases: kilter accepts what the API server's decoder accepts (go-yaml's aliasing rule) and refuses the rest
in one line, quickly, wherever it reads YAML: a snapshot, a ``--config`` file, the plugin's ``--snapshot``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.configuration import load
from kilter.model.aliasing import MAX_DEPTH, check_aliasing
from kilter.model.errors import InputError
from kilter.state.snapshot import parse_documents


def bomb(levels: int, fan_out: int = 10) -> str:
    """A top-level list whose item ``i`` lists ``fan_out`` aliases of item ``i - 1``: fan_out ** levels leaves."""
    lines = [f"- &l0 [{', '.join(['lol'] * fan_out)}]"]
    lines += [f"- &l{i} [{', '.join([f'*l{i - 1}'] * fan_out)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def expanded_counts(doc: Any) -> tuple[int, int]:
    """By brute force, for small documents: (nodes, nodes under an alias) as the decoder would count them, every
    alias expanded in full; a container met again is an alias, as PyYAML rebuilds one."""
    seen: set[int] = set()

    def walk(node: Any, under: bool) -> tuple[int, int]:
        if isinstance(node, dict | list):
            under = under or id(node) in seen
            seen.add(id(node))
            children = list(node.values()) if isinstance(node, dict) else node
            counts = [walk(child, under) for child in children]
            return 1 + sum(c[0] for c in counts), int(under) + sum(c[1] for c in counts)
        return 1, int(under)

    return walk(doc, False)


@pytest.mark.parametrize("levels,fan_out", [(2, 10), (3, 10), (3, 12), (4, 6), (2, 40), (3, 30)])
def test_a_small_document_is_refused_exactly_when_its_aliases_pass_the_decoders_rule(levels: int, fan_out: int) -> None:
    """Refused iff, expanded in full, more than 100 of over 1,000 nodes came through aliases and more than 99 %
    (the rule's share below 400,000 nodes) did at some point of the walk; for these documents, whose aliased
    share only grows, that is the share at the end."""
    text = bomb(levels, fan_out)
    [doc] = yaml.safe_load_all(text)
    nodes, aliased = expanded_counts(doc)
    refused = aliased > 100 and nodes > 1000 and aliased / nodes > 0.99
    try:
        parse_documents(text)
    except InputError as e:
        assert refused, f"{nodes} nodes, {aliased} aliased: refused ({e})"
    else:
        assert not refused, f"{nodes} nodes, {aliased} aliased: accepted"


def test_a_billion_laughs_is_refused_in_one_line_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(InputError, match=r"^snapshot owes too much to YAML aliases \(") as refused:
        parse_documents(bomb(9))
    assert "\n" not in str(refused.value)
    assert time.monotonic() - started < 5, "refused at the start of the walk, not after 10⁹ nodes"


def test_anchors_and_merge_keys_as_people_write_them_are_read() -> None:
    text = """
defaults: &defaults {apiVersion: v1, kind: ConfigMap, metadata: {namespace: ml, labels: &labels {team: a}}}
items:
- {<<: *defaults, data: {x: "1"}}
- {<<: *defaults, data: {x: "2"}, extra: *labels}
"""
    [doc] = parse_documents(text)
    assert doc["items"][1]["extra"] == {"team": "a"}


def test_a_recursive_alias_and_deep_nesting_are_refused() -> None:
    with pytest.raises(InputError):
        parse_documents("a: &a [*a]\n")
    with pytest.raises(InputError, match=f"deeper than {MAX_DEPTH}"):
        parse_documents('{"a":' * 5000 + "1" + "}" * 5000)
    with pytest.raises(InputError, match=f"deeper than {MAX_DEPTH}"):
        check_aliasing([_lists(MAX_DEPTH + 1)], "job")
    check_aliasing([_lists(MAX_DEPTH)], "job")


def _lists(depth: int) -> Any:
    """``depth`` lists, each inside the next, around one scalar."""
    doc: Any = 1
    for _ in range(depth):
        doc = [doc]
    return doc


def test_a_configuration_with_an_alias_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: config.kilter.dev/v1alpha1\nkind: Configuration\nx:\n" + _indent(bomb(9)))
    with pytest.raises(InputError, match="owes too much to YAML aliases"):
        load(path)


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())


def test_the_plugin_refuses_a_bombed_snapshot_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.yaml"
    path.write_text(bomb(9))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kubectl-kilter"), "queues", "--snapshot", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "owes too much to YAML aliases" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
