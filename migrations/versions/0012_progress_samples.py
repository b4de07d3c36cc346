"""A Job's progress history (ADR 0054): one row each time its shown progress or cost changed.

Keyed by the Job's uid and the resourceVersion of the write that recorded the sample (commit order). The
uid references ``objects.uid`` with ``ON DELETE CASCADE``, so the history goes in the transaction that
removes the Job. ``nodus.storage.progresssamples`` records (in the Job write's transaction) and bounds it:
at most 2,000 samples per Job.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "progress_samples",
        sa.Column("job_uid", sa.Text, nullable=False),
        sa.Column("rv", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed", sa.BigInteger, nullable=True),
        sa.Column("total", sa.BigInteger, nullable=True),
        sa.Column("metrics", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("cost_usd", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("job_uid", "rv", name="pk_progress_samples"),
        sa.ForeignKeyConstraint(
            ["job_uid"], ["objects.uid"], name="fk_progress_samples_job_uid_objects", ondelete="CASCADE"
        ),
    )


def downgrade() -> None:
    op.drop_table("progress_samples")
