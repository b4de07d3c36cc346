"""Nodus: a Kubernetes-style control plane for GPU batch work (API group ``nodus.dev/v1``)."""

__version__ = "0.1.0"
