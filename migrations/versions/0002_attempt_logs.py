"""Attempt logs: the stdout/stderr lines agents ship for each attempt.

Rows are keyed by the attempt's uid and the line's position in that attempt's log (``seq``: 1, 2,
3, ... assigned under a per-attempt lock, so commit order is seq order). Bounds are enforced by
``nodus.storage.logs`` on every append: at most 200,000 lines per attempt (older lines are dropped)
and 16 KiB per line (longer lines are cut and marked). Rows of a deleted attempt are not removed yet;
``namespace``/``name`` are kept so that a later sweep can find them.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempt_logs",
        sa.Column("attempt_uid", sa.Text, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("line", sa.Text, nullable=False),
        sa.CheckConstraint("stream IN ('stdout', 'stderr')", name="ck_attempt_logs_stream"),
        sa.PrimaryKeyConstraint("attempt_uid", "seq", name="pk_attempt_logs"),
    )


def downgrade() -> None:
    op.drop_table("attempt_logs")
