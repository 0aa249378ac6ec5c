"""Without its compiled core, kilter refuses to import instead of running slow code."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO


def test_missing_compiled_core_fails_the_import_with_an_instruction() -> None:
    script = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name in ("kilter._native.domains", "kilter._native.gang"):
                    raise ImportError("no compiled module")
                return None

        sys.meta_path.insert(0, Block())
        try:
            import kilter.topology
        except ImportError as exc:
            print(exc)
            sys.exit(3)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 3
    assert "run `make`" in result.stdout


def test_the_native_docstrings_name_their_twin() -> None:
    from kilter._native import domains, domainset, gang

    assert "twin.domains.FleetBitmap" in (domains.__doc__ or "")
    assert "twin.domainset.choose_domains" in (domainset.__doc__ or "")
    assert "twin.gang.plan_gang" in (gang.__doc__ or "")
