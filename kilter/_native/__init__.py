"""kilter's compiled core: bitmap models of scale-up domains, gang planning, node scoring, JSON answers, protobuf lists.

The extension modules must be built (``make`` or ``pip install .``). There is
no slow fallback: a missing build fails the import with an instruction.
"""

try:
    from kilter._native import candidates, domains, domainset, gang, jsonout, names, podsets, protoview
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "kilter's compiled core (kilter._native) is not built: run `make` (or `pip install .`) in the kilter checkout"
    ) from exc

__all__ = ["candidates", "domains", "domainset", "gang", "jsonout", "names", "podsets", "protoview"]
