"""Read a cluster snapshot file: what ``kubectl get ... -o yaml|json`` prints.

Accepts a ``v1 List`` (or any ``*List``) with ``items``, multi-document YAML
of objects, or a JSON object or array. Empty documents are skipped and lists
are flattened, as lightkube's codecs do. Objects are kept by (group, kind);
kinds nobody reads are counted and reported once, not fatal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml

from kilter.model.aliasing import MAX_DEPTH, check_aliasing, may_alias
from kilter.model.errors import InputError
from kilter.model.files import read_bounded

__all__ = [
    "MAX_SNAPSHOT_BYTES",
    "RawObjects",
    "group_objects",
    "load_documents",
    "parse_documents",
    "read_text",
    "unknown_name",
]

MAX_SNAPSHOT_BYTES = 2 * 1024**3

# libyaml's loader is ~10x faster on large snapshots; the pure one is the fallback.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class RawObjects:
    """Parsed objects grouped by (API group, kind), in file order."""

    by_kind: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    unknown: Counter[str] = field(default_factory=Counter)

    def of(self, group: str, kind: str) -> list[dict[str, Any]]:
        return self.by_kind.get((group, kind), [])


def _flatten(doc: Any, path: str) -> Iterator[tuple[dict[str, Any], str]]:
    """The objects of ``doc``, lists and ``*List`` items opened, in file order; a loop, not recursion, so that
    nesting costs no stack."""
    stack: list[tuple[Any, str]] = [(doc, path)]
    while stack:
        doc, path = stack.pop()
        if doc is None:
            continue
        if isinstance(doc, list):
            stack.extend((item, f"{path}[{i}]") for i, item in reversed(list(enumerate(doc))))
            continue
        if not isinstance(doc, dict):
            raise InputError(f"expected a Kubernetes object, got {type(doc).__name__}", path=path)
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc["items"]
            if not isinstance(items, list):
                raise InputError("items must be a list", path=f"{path}.items")
            stack.extend((item, f"{path}.items[{i}]") for i, item in reversed(list(enumerate(items))))
            continue
        yield doc, path


def parse_documents(text: str, *, source: str = "snapshot") -> list[Any]:
    """YAML (single or multi-document) or JSON text into Python documents.

    Text that is one JSON object is read as JSON, as the API server reads a JSON body: PyYAML reads JSON too, but
    ~80x slower (0.15 ms against 2 µs for a job manifest, most of a gRPC ``Plan``'s own time) and by YAML 1.1's
    rules where the two differ (``1e3`` is a string there). Anything else, a YAML flow mapping included, is YAML.
    """
    if text.lstrip()[:1] == "{":
        try:
            doc = msgspec.json.decode(text)
        except msgspec.DecodeError:
            pass  # YAML's reading, and its error if it is neither
        except RecursionError:
            raise InputError(f"{source} nests deeper than {MAX_DEPTH} levels; it is not read") from None
        else:
            return [doc]
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
        if may_alias(text):
            check_aliasing(docs, source)
        return docs
    except RecursionError:
        raise InputError(f"{source} nests deeper than {MAX_DEPTH} levels; it is not read") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "malformed"
        raise InputError(f"{source} is not valid YAML or JSON{where}: {problem}") from None


def load_documents(path: Path) -> list[Any]:
    return parse_documents(read_text(path), source=str(path))


def read_text(path: Path) -> str:
    """A manifest or snapshot file's UTF-8 text; InputError, in one line, when it is unreadable or too large."""
    try:
        return read_bounded(path, MAX_SNAPSHOT_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None


def group_objects(docs: list[Any], known: set[tuple[str, str]]) -> RawObjects:
    raw = RawObjects()
    for i, doc in enumerate(docs):
        for obj, path in _flatten(doc, f"$[{i}]"):
            api_version = obj.get("apiVersion")
            kind = obj.get("kind")
            if not isinstance(api_version, str) or not isinstance(kind, str):
                raise InputError("object without apiVersion and kind", path=path)
            key = (api_version.rpartition("/")[0], kind)
            if key in known:
                raw.by_kind.setdefault(key, []).append(obj)
            else:
                raw.unknown[unknown_name(api_version, kind)] += 1
    return raw


def unknown_name(api_version: str, kind: str) -> str:
    """How the warning about objects nobody reads names their kind (``v1/ConfigMap``, ``apps/v1, Deployment``)."""
    return f"{api_version}/{kind}" if "/" not in api_version else f"{api_version}, {kind}"
