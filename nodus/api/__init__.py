"""The HTTP API server: Kubernetes API machinery written once, and a declaration per kind."""
