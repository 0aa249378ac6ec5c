"""The one-file plugin's build files name what exists, and krew's manifest template has krew's shape.

The build itself (``make plugin``, about a minute) runs in ``.ci/run``, not here.
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "plugins" / "kubectl-kilter.spec"
LAUNCHER = REPO / "plugins" / "kubectl_kilter.py"
KREW = REPO / "plugins" / "krew.yaml"
PLACEHOLDER = re.compile(r"^\{\{[A-Z0-9_]+\}\}$")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def entry_module() -> str:
    """The ``ENTRY_MODULE = "..."`` the PyInstaller spec freezes."""
    for node in ast.parse(SPEC.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["ENTRY_MODULE"]:
            assert isinstance(node.value, ast.Constant)
            return str(node.value.value)
    raise AssertionError("the spec names no ENTRY_MODULE")


def test_the_console_script_the_spec_and_the_launcher_name_one_entry_that_exists() -> None:
    script = pyproject()["project"]["scripts"]["kubectl-kilter"]
    module, _, function = script.partition(":")
    assert module == entry_module()
    assert callable(getattr(importlib.import_module(module), function))
    launcher = ast.parse(LAUNCHER.read_text())
    imports = {(n.module, a.name) for n in ast.walk(launcher) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert (module, function) in imports


def test_make_plugin_builds_the_spec_with_pyinstaller_from_the_plugin_extra() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^plugin: .*\n((?:\t.*\n?)+)", makefile, re.M)
    assert recipe is not None, "no plugin target"
    assert "pyinstaller" in recipe.group(1) and "plugins/kubectl-kilter.spec" in recipe.group(1)
    extras = pyproject()["project"]["optional-dependencies"]
    assert any(req.startswith("pyinstaller") for req in extras["plugin"])
    assert any("plugin" in req for req in extras["dev"] if req.startswith("kilter["))  # `make` installs .[dev]


def test_the_spec_freezes_the_compiled_core_and_not_the_twin() -> None:
    text = SPEC.read_text()
    assert 'collect_submodules("kilter")' in text and "kilter._native.twin" in text
    assert '"yaml._yaml"' in text  # libyaml's loader, imported in a try


def test_the_krew_manifest_template_has_krews_shape() -> None:
    manifest = yaml.safe_load(KREW.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == "kilter"  # `kubectl kilter` runs kubectl-kilter
    spec = manifest["spec"]
    assert spec["version"].startswith("v") and PLACEHOLDER.match(spec["version"][1:])
    assert spec["shortDescription"] and spec["description"]
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert set(platform["selector"]["matchLabels"]) == {"os", "arch"}
        assert platform["uri"].endswith((".tar.gz", ".zip"))
        assert PLACEHOLDER.match(platform["sha256"]) or re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == "kubectl-kilter"
        assert {"from": "kubectl-kilter", "to": "."} in platform["files"]
