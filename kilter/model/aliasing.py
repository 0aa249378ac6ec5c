"""How much a parsed YAML document may owe to aliases: the rule Kubernetes' own YAML decoder applies.

A YAML alias (``*a``) stands for the whole node its anchor (``&a``) names,
so a 2 KB file of aliased lists of aliased lists stands for 10⁹ objects.
PyYAML builds such a file cheaply (an alias becomes the same Python object
again), but anything that walks the result walks every expansion, without
end. The API server refuses these documents ("document contains excessive
aliasing", the go-yaml decoder that sigs.k8s.io/yaml wraps): it counts the
nodes it decodes and those it decodes through an alias, and once more than
100 of 1,000 came through aliases, refuses the document when their share
exceeds 99 % up to 400,000 nodes, falling linearly to 10 % at 4,000,000.
kilter applies the same numbers, so what kube-apiserver would accept from
``kubectl apply`` kilter accepts from a file, and nothing else.

The walk expands aliases as the decoder does but stops at the first node
that breaks the rule, so a bomb costs at most a few hundred thousand steps;
it runs only on text that has both an anchor and an alias mark (``&`` and
``*``), since without them no node is an alias.
"""

from __future__ import annotations

from typing import Any

from kilter.model.errors import InputError

__all__ = ["MAX_DEPTH", "check_aliasing", "may_alias"]

_RANGE_LOW = 400_000
_RANGE_HIGH = 4_000_000
MAX_DEPTH = 1_000
"""Nesting deeper than this is refused too: a Kubernetes object is a few dozen levels deep, and Python's own
recursion (json, copy, pydantic) fails near a thousand."""


def _allowed_ratio(decoded: int) -> float:
    if decoded <= _RANGE_LOW:
        return 0.99
    if decoded >= _RANGE_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _RANGE_LOW) / (_RANGE_HIGH - _RANGE_LOW)


def may_alias(text: str) -> bool:
    """Whether ``text`` could hold an alias at all (an anchor's ``&`` and an alias's ``*``): the cheap test that
    spares a large snapshot without aliases the walk."""
    return "&" in text and "*" in text


def check_aliasing(docs: list[Any], source: str) -> None:
    """InputError, in one line naming ``source``, when ``docs`` (as PyYAML built them, an alias being the anchored
    object again) owe more to aliases than the API server allows, or nest deeper than ``MAX_DEPTH``.

    A container met a second time is an alias: it and everything below it count as decoded through one. Scalars
    are never told apart by identity (Python shares equal small ints and strings), only counted."""
    seen: set[int] = set()
    decoded = aliased = 0
    stack: list[tuple[Any, int, bool]] = [(doc, 1, False) for doc in reversed(docs)]
    while stack:
        node, depth, through_alias = stack.pop()
        if isinstance(node, dict | list):
            if id(node) in seen:
                through_alias = True
            else:
                seen.add(id(node))
            if depth > MAX_DEPTH:
                raise InputError(f"{source} nests deeper than {MAX_DEPTH} levels; it is not read")
            children = list(node.values()) if isinstance(node, dict) else node
            stack.extend((child, depth + 1, through_alias) for child in reversed(children))  # in document order
        decoded += 1
        aliased += through_alias
        if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_ratio(decoded):
            raise InputError(
                f"{source} owes too much to YAML aliases ({aliased:,} of the first {decoded:,} nodes), "
                "as the API server refuses it; it is not read"
            )
