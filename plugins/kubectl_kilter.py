"""The script PyInstaller freezes into the one-file ``kubectl-kilter`` (plugins/kubectl-kilter.spec)."""

import sys

from kilter.cli.kubectl.main import main

if __name__ == "__main__":
    sys.exit(main())
