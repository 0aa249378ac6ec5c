"""The servers' verbs: kube-scheduler extender (and, later, Volcano and gRPC) over the shared state."""
