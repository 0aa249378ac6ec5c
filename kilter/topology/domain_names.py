"""Names of scale-up domains that people can read, type and paste back.

A GB200 rack's domain id is its NVLink clique label,
``<ClusterUUID>.<CliqueId>``: 42 characters nobody types, cut in views to a
head and a tail that no command took back. Every view now shows a domain's
*short name*: its id when that is short (a hostname, a rack label), else the
shortest prefix of it, at least ``MIN_PREFIX`` characters, that no other
domain's id starts with (as git shortens a commit). Every command that takes
a domain (``resolve``) takes that short name, the full id, or any prefix of
the id that only one domain has.
"""

from __future__ import annotations

from collections.abc import Sequence

from kilter.model.errors import InputError

__all__ = ["MIN_PREFIX", "SHORT_ENOUGH", "resolve", "short_names"]

MIN_PREFIX = 8
SHORT_ENOUGH = 24  # an id this short is its own name


def short_names(ids: Sequence[str]) -> list[str]:
    """Each id's short name (module docstring), aligned with ``ids``; unique when the ids are."""
    order = sorted(range(len(ids)), key=ids.__getitem__)
    out = list(ids)
    for at, i in enumerate(order):
        name = ids[i]
        if len(name) <= SHORT_ENOUGH:
            continue
        shared = max(
            (_common(name, ids[order[j]]) for j in (at - 1, at + 1) if 0 <= j < len(order)),
            default=0,
        )
        out[i] = name[: max(MIN_PREFIX, shared + 1)]
    return out


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def resolve(wanted: str, ids: Sequence[str], names: Sequence[str] | None = None) -> str:
    """The id of the domain ``wanted`` names: its id, its short name, or a prefix of its id no other id has.
    ``InputError`` otherwise, saying whether no domain or several matched and where the names are listed."""
    if wanted in ids:
        return wanted
    names = short_names(ids) if names is None else names
    if wanted in names:
        return ids[list(names).index(wanted)]
    matches = [d for d in ids if d.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    listing = "kubectl kilter domains (or kilter fleet validate) lists them"
    if matches:
        shown = ", ".join(names[ids.index(d)] for d in matches[:5])
        raise InputError(f"{wanted!r} names {len(matches)} domains ({shown}{', ...' if len(matches) > 5 else ''})")
    raise InputError(f"no GPU domain named {wanted!r}: give its name, its full id or a prefix of it; {listing}")
