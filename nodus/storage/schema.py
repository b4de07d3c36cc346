"""The relational schema: one generic object table, the watch log, and the resourceVersion counter.

Bodies are stored as JSON *text* exactly as they are served, so a GET or LIST returns stored bytes
without decoding and re-encoding them; the columns beside the body (labels, phase, owners, deletion)
are the only parts SQL looks into.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

# Constraint names are deterministic so that Alembic migrations can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

objects = sa.Table(
    "objects",
    metadata,
    sa.Column("kind", sa.Text, nullable=False),
    # The project for namespaced kinds; '' for cluster-scoped kinds.
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("uid", sa.Text, nullable=False),
    sa.Column("rv", sa.BigInteger, nullable=False),
    sa.Column("labels", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("phase", sa.Text, nullable=True),
    sa.Column("owner_uids", pg.ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'")),
    sa.Column("deleting", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("body", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("kind", "namespace", "name"),
    sa.UniqueConstraint("uid"),
    sa.Index(None, "owner_uids", postgresql_using="gin"),
    sa.Index(None, "labels", postgresql_using="gin"),
    sa.Index(None, "kind", "deleting", postgresql_where=sa.text("deleting")),
)

# The watch log: one row per write, appended in the writing transaction, in resourceVersion order.
events = sa.Table(
    "events",
    metadata,
    sa.Column("rv", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("type", sa.Text, nullable=False),  # ADDED, MODIFIED, DELETED
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("labels", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("phase", sa.Text, nullable=True),
    # The object before this write (MODIFIED, DELETED): lets a watch with a selector see an object
    # leave it, and lets a paged list rebuild the state at an older resourceVersion.
    sa.Column("prev_body", sa.Text, nullable=True),
    sa.Column("prev_labels", pg.JSONB, nullable=True),
    sa.Column("prev_phase", sa.Text, nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Index(None, "kind", "namespace", "name", "rv"),
    sa.Index(None, "created_at"),
)

# Single-row counters: 'rv' (the last resourceVersion handed out) and 'compacted_rv' (every event at
# or below it has been removed from the log; a watch or continue token from before it gets 410).
counters = sa.Table(
    "counters",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

NOTIFY_CHANNEL = "nodus_events"

# Attempt logs (migration 0002): each attempt's stdout/stderr lines, keyed by the attempt's uid and the
# line's position in its log (``seq`` from 1, assigned under a per-attempt lock: commit order is seq
# order, so a reader that continues after the last seq it saw never skips a line). Bounded by
# ``nodus.storage.logs`` on append: 200,000 lines per attempt (oldest dropped), 16 KiB per line.
attempt_logs = sa.Table(
    "attempt_logs",
    metadata,
    sa.Column("attempt_uid", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False, autoincrement=False),
    # Where the attempt lived, for a sweep of the lines of deleted attempts.
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("stream", sa.Text, nullable=False),  # stdout, stderr
    sa.Column("time", sa.DateTime(timezone=True), nullable=False),  # as the agent read it (microseconds)
    sa.Column("line", sa.Text, nullable=False),
    # '' for the program; "init" or a sidecar's name for the others (kubectl logs -c NAME).
    sa.Column("container", sa.Text, nullable=False, server_default=""),
    sa.CheckConstraint("stream IN ('stdout', 'stderr')", name="stream"),
    sa.PrimaryKeyConstraint("attempt_uid", "seq"),
)

# Content-addressed blobs (outputs, Volume revisions, sources): a digest in a project, naming the
# object ``uploads/<upload_id>`` in the object store (several projects may share one). nodus.storage.blobs.
blobs = sa.Table(
    "blobs",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("digest", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("media_type", sa.Text, nullable=False),
    sa.Column("upload_id", sa.Uuid, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    # Migration 0009 (ADR 0034): when something last named it, and until when a Job bills its bytes.
    sa.Column("referenced_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Column("attributed_until", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("namespace", "digest"),
    sa.Index("ix_blobs_digest", "digest"),
    sa.Index("ix_blobs_upload_id", "upload_id"),
    sa.Index("ix_blobs_namespace_referenced_at", "namespace", "referenced_at"),
)

# The bytes of each project's blobs, moved with every row inserted or deleted (migration 0009).
blob_usage = sa.Table(
    "blob_usage",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("namespace"),
    sa.CheckConstraint("bytes >= 0", name="not_negative"),
)

# One row per ended hour of a project's storage: the bytes no Job bills and their price (migration 0009,
# nodus.storage.storagehours).
project_storage_hours = sa.Table(
    "project_storage_hours",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("project_uid", sa.Text, nullable=False),
    sa.Column("hour", sa.BigInteger, nullable=False, autoincrement=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("amount", sa.Numeric(24, 6), nullable=False),
    sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Column("charged_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("project_uid", "hour"),
    sa.CheckConstraint("bytes >= 0 AND amount >= 0", name="not_negative"),
    sa.Index("ix_project_storage_hours_namespace", "namespace"),
    sa.Index(
        "ix_project_storage_hours_unpaid",
        "project_uid",
        "hour",
        postgresql_where=sa.text("amount > 0 AND charged_at IS NULL"),
    ),
)

# A Job's progress history (migration 0012, nodus.storage.progresssamples): a sample per write that changed its
# progress or cost, in commit order; it goes with the Job (ON DELETE CASCADE), at most 2,000 per Job.
progress_samples = sa.Table(
    "progress_samples",
    metadata,
    sa.Column("job_uid", sa.Text, sa.ForeignKey("objects.uid", ondelete="CASCADE"), nullable=False),
    sa.Column("rv", sa.BigInteger, nullable=False, autoincrement=False),
    sa.Column("time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("completed", sa.BigInteger, nullable=True),
    sa.Column("total", sa.BigInteger, nullable=True),
    sa.Column("metrics", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("cost_usd", sa.Text, nullable=True),
    sa.PrimaryKeyConstraint("job_uid", "rv"),
)
