"""Every kind this server serves, with the dependencies their strategies and admission need.

Kinds are declared once, as module constants, with strategies that need nothing from a server (the
OpenAPI documents and unit tests read those). A server builds its registry with :class:`Dependencies`:
the Secret strategy gets the server's keyring, the Job, Pipeline and Connection strategies its destination
policy, and the Job its admission (the estimate and funding checks, which read storage). Nothing is
configured process-wide, so two servers in one process (tests) never share a keyring or a policy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodus.api.kinds.attempt import ATTEMPT
from nodus.api.kinds.bootstraptoken import BOOTSTRAP_TOKEN
from nodus.api.kinds.budget import BUDGET
from nodus.api.kinds.connection import CONNECTION, ConnectionStrategy
from nodus.api.kinds.job import JOB, JobStrategy
from nodus.api.kinds.lease import LEASE
from nodus.api.kinds.node import NODE
from nodus.api.kinds.offering import OFFERING
from nodus.api.kinds.pipeline import PIPELINE, PipelineStrategy
from nodus.api.kinds.pool import POOL
from nodus.api.kinds.project import PROJECT
from nodus.api.kinds.secret import SECRET, SecretStrategy
from nodus.api.kinds.volume import VOLUME
from nodus.api.kinds.workspace import WORKSPACE
from nodus.api.registry import Admission, Registry
from nodus.apimachinery.destinations import Policy
from nodus.apimachinery.sealing import Keyring


@dataclass(frozen=True)
class Dependencies:
    """What a server gives the kinds that need it; the defaults are a server without them."""

    keyring: Keyring | None = None
    """Seals Secret values; None: a write with values answers 503."""
    destinations: Policy = dataclasses.field(default_factory=Policy)
    """What the agent may connect to (strict by default: no loopback)."""
    job_admission: Admission | None = None
    """The Job's estimate and funding checks on create."""
    pipeline_admission: Admission | None = None
    """The Pipeline's estimate of its whole graph on create (ADR 0052)."""


def registry(dependencies: Dependencies | None = None) -> Registry:
    deps = dependencies or Dependencies()
    kinds = Registry()
    kinds.register(PROJECT)
    kinds.register(dataclasses.replace(JOB, strategy=JobStrategy(deps.destinations), admission=deps.job_admission))
    kinds.register(ATTEMPT)
    kinds.register(NODE)
    kinds.register(LEASE)
    kinds.register(OFFERING)
    kinds.register(VOLUME)
    kinds.register(dataclasses.replace(SECRET, strategy=SecretStrategy(deps.keyring)))
    kinds.register(dataclasses.replace(CONNECTION, strategy=ConnectionStrategy(deps.destinations)))
    kinds.register(BUDGET)
    kinds.register(BOOTSTRAP_TOKEN)
    kinds.register(POOL)
    kinds.register(
        dataclasses.replace(PIPELINE, strategy=PipelineStrategy(deps.destinations), admission=deps.pipeline_admission)
    )
    kinds.register(WORKSPACE)
    return kinds
