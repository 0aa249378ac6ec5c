"""Reading manifest files for the manifest tests: every YAML document, and the one of a kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]


def documents(path: Path) -> list[Obj]:
    with path.open(encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert all(isinstance(d, dict) for d in docs), f"{path.name}: every document must be a mapping"
    return docs


def one(docs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
