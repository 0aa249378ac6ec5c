"""How every kilter command ends: its answer's exit code, or an error turned into one line and a code.

Shared by ``kilter`` and ``kubectl kilter`` so that both keep one promise:
0 done, 1 a negative answer (or a bug, reported in one line), 2 bad input
(one line on stderr, never a traceback), 130 interrupted. ``KILTER_DEBUG=1``
lets a bug's traceback through.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from kilter.model.errors import KilterError

__all__ = ["guarded"]


def guarded(prefix: str, command: Callable[[], int]) -> int:
    """``command()``'s exit code; its errors as one line on stderr starting with ``prefix`` (``kilter plan``)."""
    try:
        return command()
    except KilterError as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: a bug, reported in one line unless asked for more
        if os.environ.get("KILTER_DEBUG") == "1":
            raise
        print(
            f"{prefix}: internal error: {type(exc).__name__}: {exc} (rerun with KILTER_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1
