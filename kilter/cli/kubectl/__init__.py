"""``kubectl kilter``: the kubectl plugin, one module per view over the shared options and state source."""

from kilter.cli.kubectl import completion, domains, explain, main, output, pending, plan, queues, source, top

__all__ = ["completion", "domains", "explain", "main", "output", "pending", "plan", "queues", "source", "top"]
