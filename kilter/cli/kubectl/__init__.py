"""``kubectl kilter``: the kubectl plugin (placeholder until the plugin's views land; see ``main``)."""

from kilter.cli.kubectl import main

__all__ = ["main"]
