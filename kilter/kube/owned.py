"""The part of an object one field manager owns, read from its ``managedFields`` (``FieldsV1``).

Server-side apply removes whatever a manager owned and leaves out of its
next apply. So a writer that must apply under another controller's
manager name (MultiKueue's external dispatcher applies as
``kueue-admission``, or Kueue could never clear its nominations) has to
send back everything that manager owns, with the value the object has
now, and change only its own field. ``owned`` cuts that part out of a live
object; the encoding is structured-merge-diff's: ``f:NAME`` a field,
``k:{"type":"Admitted"}`` a ``listType=map`` item by its keys, ``v:VALUE``
a ``listType=set`` item, ``.`` the field itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["manager_fields", "owned"]


def manager_fields(obj: Mapping[str, Any], manager: str, *, subresource: str = "") -> dict[str, Any]:
    """The ``fieldsV1`` of ``manager``'s apply entry for ``subresource`` ("" the object, "status"...); {} if none."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and (entry.get("subresource") or "") == subresource
        ):
            fields = entry.get("fieldsV1")
            return dict(fields) if isinstance(fields, Mapping) else {}
    return {}


def _whole(fields: Any) -> bool:
    """Owned as one value: a leaf (``{}``) or an atomic field with nothing below ``.``."""
    return not isinstance(fields, Mapping) or not any(k != "." for k in fields)


def owned(value: Any, fields: Any) -> Any:
    """The part of ``value`` that ``fields`` (a ``fieldsV1`` trie at the same place) names; a map item keeps its
    keys, so an apply of the result finds the same item."""
    if _whole(fields) or value is None:
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, below in fields.items():
            if key.startswith("f:") and key[2:] in value:
                out[key[2:]] = owned(value[key[2:]], below)
        return out
    if isinstance(value, list):
        items = []
        for key, below in fields.items():
            if key.startswith("k:"):
                keys = json.loads(key[2:])
                for item in value:
                    if isinstance(item, Mapping) and all(item.get(k) == v for k, v in keys.items()):
                        part = owned(item, below)
                        items.append({**keys, **part} if isinstance(part, Mapping) else part)
            elif key.startswith("v:"):
                wanted = json.loads(key[2:])
                items.extend(item for item in value if item == wanted)
            elif key.startswith("i:") and key[2:].isdigit() and int(key[2:]) < len(value):
                items.append(owned(value[int(key[2:])], below))
        return items
    return value
