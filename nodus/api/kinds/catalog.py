"""Every kind this server serves."""

from __future__ import annotations

from nodus.api.kinds.job import JOB
from nodus.api.kinds.project import PROJECT
from nodus.api.registry import Registry


def registry() -> Registry:
    kinds = Registry()
    kinds.register(PROJECT)
    kinds.register(JOB)
    return kinds
