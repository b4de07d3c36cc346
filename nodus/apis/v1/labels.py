"""The label, annotation and finalizer keys Nodus writes and reads, each written once.

Labels select (agents watch the Attempts labelled with their node; logs and the Job controller find
a Job's Attempts by ``nodus.dev/job``). Annotations carry requests and bookkeeping that are not part
of a kind's schema: a user's requested restart or checkpoint, a controller's record of what it has
charged, an injected fault. Finalizers hold a deletion until a controller has done its part.
"""

from __future__ import annotations

from typing import Final

# Labels on Attempts (set by the Job controller and the provisioner).
JOB: Final = "nodus.dev/job"
"""The name of the Job an Attempt runs."""
INDEX: Final = "nodus.dev/index"
"""The completion index an Attempt runs."""
NODE: Final = "nodus.dev/node"
"""The Node an Attempt is assigned to; agents select their work on it. Also on a node's join token."""
GANG_EPOCH: Final = "nodus.dev/gang-epoch"
"""The gang epoch a rank attempt belongs to."""
OFFERING: Final = "nodus.dev/offering"
"""The offering a Node was provisioned from."""
POOL: Final = "nodus.dev/pool"
"""On a Node and a join token: the Pool (by name) the host joined or the token adds hosts to."""
POOL_PROJECT: Final = "nodus.dev/pool-project"
"""On a Node and a join token: the project of that Pool."""

# Labels on a Pipeline's stage Jobs (set by the Pipeline controller).
PIPELINE: Final = "nodus.dev/pipeline"
"""The Pipeline that created a Job."""
STAGE: Final = "nodus.dev/stage"
"""The stage of that Pipeline a Job runs."""

# Annotations.
RESTART_REQUESTED_AT: Final = "nodus.dev/restart-requested-at"
"""On a Job: a user asks for a restart at this time (each new value restarts once)."""
CHECKPOINT_REQUESTED_AT: Final = "nodus.dev/checkpoint-requested-at"
"""On a Job: a user asks for a checkpoint now (each new value asks once)."""
TERMINATE_AT: Final = "nodus.dev/terminate-at"
"""On a Node: the provider reclaims the host at this time (a preemption notice)."""
DRAIN_REQUESTED_AT: Final = "nodus.dev/drain-requested-at"
"""On a Node: its work is being moved elsewhere with checkpoints since this time (``nodus pools drain``)."""
DRAIN_GRACE_SECONDS: Final = "nodus.dev/drain-grace-seconds"
"""On a Node being drained: how long each program has to checkpoint before it is stopped."""
RERUN_REQUESTED_AT: Final = "nodus.dev/rerun-requested-at"
"""On a Pipeline: a user asks for a re-run at this time (each new value re-runs once, ADR 0052)."""
RERUN_FROM: Final = "nodus.dev/rerun-from"
"""On a Pipeline: the stage a re-run starts from (it and every stage downstream of it run again)."""
STAGE_KEY: Final = "nodus.dev/stage-key"
"""On a Pipeline's stage Job: the SHA-256 of its template and input digests (content-addressed reuse)."""
PINNED_VERSIONS: Final = "nodus.dev/pinned-versions"
"""On a Secret: the versions that live Jobs pin, as ``1,3``; the server keeps them."""

# Finalizers.
STOP_ATTEMPTS: Final = "nodus.dev/stop-attempts"
"""On a Job: its Attempts must stop (and be billed) before it goes."""
PROJECT_CONTENTS: Final = "nodus.dev/project-contents"
"""On a Project: everything it holds must be deleted before it goes."""
STORAGE_CHARGES: Final = "nodus.dev/storage-charges"
"""On a Job with billed bytes: every hour of storage up to its deletion must be charged before it goes."""
POOL_HOSTS: Final = "nodus.dev/pool-hosts"
"""On a Pool: its Nodes (the hosts that joined it) must be deleted before it goes."""
