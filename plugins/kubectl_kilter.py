"""The script PyInstaller freezes into the one-file ``kubectl-kilter`` (plugins/kubectl-kilter.spec)."""

from kilter.cli.kubectl.main import run

if __name__ == "__main__":
    run()
