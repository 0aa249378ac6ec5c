"""Short domain names: unique, as short as uniqueness allows, and taken back by every command that names one."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

from kilter.cli.kubectl.main import main as kubectl_main
from kilter.cli.main import main
from kilter.model.errors import InputError
from kilter.topology.domain_names import MIN_PREFIX, SHORT_ENOUGH, resolve, short_names
from tests.topology.builders import CLIQUE, node


def _clique(rng: random.Random, shared: str) -> str:
    """An NVLink clique label, ``<ClusterUUID>.<CliqueId>``, whose UUID starts with ``shared``."""
    tail = "".join(rng.choice("0123456789abcdef") for _ in range(36 - len(shared)))
    return f"{shared}{tail}.{rng.randint(30000, 32767)}"


@pytest.mark.parametrize("seed", range(20))
def test_each_name_is_the_shortest_unique_prefix_by_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    shared = "".join(rng.choice("0123") for _ in range(rng.randint(0, 10)))  # ids that share long heads
    ids = [_clique(rng, shared[: rng.randint(0, len(shared))]) for _ in range(rng.randint(1, 40))]
    ids += [f"node-{i}" for i in range(rng.randint(0, 3))]  # short ids: their own names
    ids = list(dict.fromkeys(ids))
    names = short_names(ids)
    assert len(set(names)) == len(ids)
    for d, name in zip(ids, names, strict=True):
        if len(d) <= SHORT_ENOUGH:
            assert name == d
            continue
        unique = [n for n in range(MIN_PREFIX, len(d) + 1) if sum(o.startswith(d[:n]) for o in ids) == 1]
        assert name == d[: unique[0]]
        assert resolve(name, ids, names) == d == resolve(d, ids, names)


def test_resolve_takes_a_unique_prefix_and_says_when_a_name_is_ambiguous_or_unknown() -> None:
    ids = ["0cb1e29c-658c-4a14-95e6-0af593bd04cf.32757", "0fd630f1-f29d-4da9-953f-48f1a09f76b5.32758", "gpu-7"]
    assert short_names(ids) == ["0cb1e29c", "0fd630f1", "gpu-7"]
    assert resolve("0cb", ids) == ids[0] and resolve("gpu-7", ids) == "gpu-7"
    with pytest.raises(InputError, match=r"'0' names 2 domains \(0cb1e29c, 0fd630f1\)"):
        resolve("0", ids)
    with pytest.raises(InputError, match=r"no GPU domain named 'nvl72-r01'.*kubectl kilter domains"):
        resolve("nvl72-r01", ids)


def test_the_name_domains_shows_is_the_one_maintenance_plan_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["domains", "--demo", "--no-headers"]) == 0
    first = capsys.readouterr().out.splitlines()[0].split()[0]
    assert len(first) == MIN_PREFIX  # a clique id, shortened
    assert main(["maintenance", "plan", "--demo", "--domains", first, "-o", "json"]) == 0
    [step] = json.loads(capsys.readouterr().out)["steps"]
    [domain] = step["domains"]
    assert domain["domain"].startswith(first) and len(domain["domain"]) > SHORT_ENOUGH


def test_an_operator_s_rack_label_names_the_domains_where_it_is_unique(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = "inventory.example.com/rack"
    racks = {"r1": "A01", "r2": "A02", "r3": "B01", "r4": "B01"}  # r3 and r4 share a name: neither is called so
    nodes = [
        node(f"{r}-t{t:02d}", labels={CLIQUE: _clique(random.Random(r), "") + "x", inventory: name})
        for r, name in racks.items()
        for t in range(18)
    ]
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [msgspec.to_builtins(n) for n in nodes]})
    )
    platforms = tmp_path / "platforms.yaml"
    platforms.write_text(f"platforms:\n- name: GB200-NVL72\n  domainNameLabel: {inventory}\n")
    source = ["--snapshot", str(snapshot), "--platforms", str(platforms)]
    assert kubectl_main(["domains", *source, "--no-headers"]) == 0
    shown = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert sorted(shown)[:2] == ["A01", "A02"] and "B01" not in shown and len(shown) == 4
    assert main(["maintenance", "plan", *source, "--domains", "A02", "-o", "json"]) == 0
    [step] = json.loads(capsys.readouterr().out)["steps"]
    assert [d["nodes"][0] for d in step["domains"]] == ["r2-t00"]
    assert kubectl_main(["domains", "--snapshot", str(snapshot), "--no-headers"]) == 0  # no label named: ids
    assert "A01" not in capsys.readouterr().out
