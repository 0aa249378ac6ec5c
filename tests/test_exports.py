"""Each subpackage's ``__all__`` is exactly its public surface."""

from __future__ import annotations
import __future__

import importlib
import types

import pytest

PACKAGES = [
    "kilter.model",
    "kilter.topology",
    "kilter.quota",
    "kilter.quota.preempt",
    "kilter.quota.preempt.fairsharing",
    "kilter.kube",
    "kilter.state",
    "kilter.gangs",
    "kilter.extenders",
    "kilter.extenders.volcano",
    "kilter.webhooks",
    "kilter.api",
    "kilter.pool",
    "kilter.lifecycle",
    "kilter.sim",
    "kilter.cli",
    "kilter._native",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_every_public_name(name: str) -> None:
    module = importlib.import_module(name)
    for exported in module.__all__:  # a package that imports its modules on first use (kilter.cli) does it now
        getattr(module, exported)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and not (isinstance(v, types.ModuleType) and not v.__name__.startswith(name))
        and not isinstance(v, __future__._Feature)  # `from __future__ import annotations`
    }
    public -= {"twin"}  # the twin is imported by tests, never exported
    assert set(module.__all__) == public
