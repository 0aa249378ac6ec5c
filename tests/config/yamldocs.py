"""Reading config/ for the install tests: a component's own files, a built overlay, and the one of a kind.

A component's resources are whole objects read straight from its files, so most checks run with or without
kubectl. What the components only patch in (the webhooks' certificate, cert-manager's CA injection) and the
overlays themselves are built by the real ``kubectl kustomize``; those tests skip, saying why, without kubectl.
"""

from __future__ import annotations

import argparse
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

Obj = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
COMPONENTS = CONFIG / "components"
OVERLAYS = sorted(p.name for p in (CONFIG / "overlays").iterdir() if (p / "kustomization.yaml").is_file())


def documents(path: Path) -> list[Obj]:
    with path.open(encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert all(isinstance(d, dict) for d in docs), f"{path.name}: every document must be a mapping"
    return docs


def component(name: str) -> list[Obj]:
    """The objects a component (or the base) adds, read from the files its kustomization lists."""
    folder = COMPONENTS / name if name != "base" else CONFIG / "base"
    kustomization = documents(folder / "kustomization.yaml")[0]
    return [doc for resource in kustomization.get("resources", []) for doc in documents(folder / resource)]


@functools.cache
def _built(overlay: str) -> tuple[Obj, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return ()
    out = subprocess.run(
        [kubectl, "kustomize", str(CONFIG / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"kubectl kustomize config/overlays/{overlay}: {out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d is not None)


def overlay(name: str) -> list[Obj]:
    """Every object ``kubectl kustomize config/overlays/<name>`` builds; the test skips without kubectl."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: the overlays are built with kubectl kustomize")
    return [dict(d) for d in _built(name)]


def container(pod_spec: Obj, name: str) -> Obj:
    """The one container ``name`` of a pod spec."""
    found: list[Obj] = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r}"
    return found[0]


# What the downward API gives a container's env in these tests (documentation addresses, RFC 5737).
FIELD_VALUES = {"status.hostIP": "192.0.2.10", "status.podIP": "198.51.100.20", "metadata.namespace": "kube-system"}


def container_argv(kilter: Obj) -> list[str]:
    """The container's command and args as the kubelet runs them: ``$(NAME)`` replaced by the container's env
    variable NAME (a value, or a downward-API field as ``FIELD_VALUES`` gives it), ``$$`` by ``$``."""
    env: dict[str, str] = {}
    for var in kilter.get("env", []):
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[var["name"]] = FIELD_VALUES[field] if field is not None else str(var.get("value", ""))

    def expand(word: str) -> str:
        return re.sub(
            r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), word
        )

    return [expand(str(a)) for a in (*kilter.get("command", []), *kilter.get("args", []))]


def kilter_command(pod_spec: Obj) -> argparse.Namespace:
    """What kilter's own parser reads of the ``kilter`` container's command line."""
    from kilter.cli.main import build_parser

    kilter = container(pod_spec, "kilter")
    argv = container_argv(kilter)
    assert argv[:1] == ["kilter"], "the kilter container runs the kilter command"
    return build_parser().parse_args(argv[1:])


def one(docs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
