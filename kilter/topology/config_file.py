"""Reading the small YAML files that extend kilter's own tables (platforms, health signals), one way.

Each refusal is one line naming the file and what it is for: unreadable,
not UTF-8, or not YAML (the parser's multi-line message folded into one).
What the document must hold is the caller's to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kilter.model.errors import InputError

__all__ = ["read_yaml"]


def read_yaml(path: Path, what: str) -> Any:
    """The document of YAML file ``path``; ``what`` names the file in errors (``platform file``)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{what} {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not UTF-8 text") from None
