"""Every kind this server serves."""

from __future__ import annotations

from nodus.api.kinds.attempt import ATTEMPT
from nodus.api.kinds.bootstraptoken import BOOTSTRAP_TOKEN
from nodus.api.kinds.budget import BUDGET
from nodus.api.kinds.connection import CONNECTION
from nodus.api.kinds.job import JOB
from nodus.api.kinds.lease import LEASE
from nodus.api.kinds.node import NODE
from nodus.api.kinds.offering import OFFERING
from nodus.api.kinds.project import PROJECT
from nodus.api.kinds.secret import SECRET
from nodus.api.kinds.volume import VOLUME
from nodus.api.registry import Registry


def registry() -> Registry:
    kinds = Registry()
    kinds.register(PROJECT)
    kinds.register(JOB)
    kinds.register(ATTEMPT)
    kinds.register(NODE)
    kinds.register(LEASE)
    kinds.register(OFFERING)
    kinds.register(VOLUME)
    kinds.register(SECRET)
    kinds.register(CONNECTION)
    kinds.register(BUDGET)
    kinds.register(BOOTSTRAP_TOKEN)
    return kinds
