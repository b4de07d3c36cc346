"""Blob collection and project storage charges (ADR 0034).

* ``blobs.referenced_at``: when something that exists was last found naming the blob (or it was
  uploaded again, or a checkpoint manifest naming it was uploaded). The blob collector deletes a row
  once this is older than the grace period. Rows of earlier releases start from the migration's time,
  so every existing blob gets a whole grace period.
* ``blobs.attributed_until``: until when a Job bills the blob's bytes as one of its outputs (NULL:
  never). A project is charged only for bytes no Job bills (ADR 0023 bills Jobs).
* ``blob_usage(namespace, bytes)``: the bytes of each project's blobs (the sum of its rows' sizes), moved
  in the transaction that inserts or deletes a row. Its row is what a registration locks first: quota
  checks of one project are serialised on it, and reading a project's usage costs one row, not a sum.
* ``project_storage_hours(namespace, project_uid, hour, bytes, amount, sampled_at, charged_at)``: one
  row per ended hour of a project's storage, written once, at the first collection pass after the hour
  ended: the bytes the project kept then that no Job bills, and what that hour costs. The ledger's
  charge of the hour is keyed ``storage:<project uid>:<hour>`` and posts exactly ``amount``; an hour
  the project could not pay is charged later from this row, so a retry never prices it again.
  ``charged_at`` is set once the ledger has the charge (the ledger is the truth: a crash in between
  is a replay of the same key on the next pass).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "blobs",
        sa.Column("referenced_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.add_column("blobs", sa.Column("attributed_until", sa.DateTime(timezone=True), nullable=True))
    # The collector's candidates: a project's rows unreferenced for longer than the grace period.
    op.create_index("ix_blobs_namespace_referenced_at", "blobs", ["namespace", "referenced_at"])
    op.create_table(
        "blob_usage",
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("namespace", name="pk_blob_usage"),
        sa.CheckConstraint("bytes >= 0", name="ck_blob_usage_not_negative"),
    )
    op.execute("INSERT INTO blob_usage (namespace, bytes) SELECT namespace, sum(size) FROM blobs GROUP BY namespace")
    op.create_table(
        "project_storage_hours",
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("project_uid", sa.Text, nullable=False),
        sa.Column("hour", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("amount", sa.Numeric(24, 6), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("charged_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("project_uid", "hour", name="pk_project_storage_hours"),
        sa.CheckConstraint("bytes >= 0 AND amount >= 0", name="ck_project_storage_hours_not_negative"),
    )
    op.create_index("ix_project_storage_hours_namespace", "project_storage_hours", ["namespace"])
    # The hours still to charge: few, whatever the history.
    op.create_index(
        "ix_project_storage_hours_unpaid",
        "project_storage_hours",
        ["project_uid", "hour"],
        postgresql_where=sa.text("amount > 0 AND charged_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("project_storage_hours")
    op.drop_table("blob_usage")
    op.drop_index("ix_blobs_namespace_referenced_at", table_name="blobs")
    op.drop_column("blobs", "attributed_until")
    op.drop_column("blobs", "referenced_at")
