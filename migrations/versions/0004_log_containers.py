"""Log containers: which program of an attempt wrote a line.

``container`` is '' for the main program, otherwise the name of an init command or a sidecar (such
as ``init`` or ``sidecar-proxy``). Existing lines belong to the main program.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: PostgreSQL adds the column without rewriting the table.
    op.add_column("attempt_logs", sa.Column("container", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("attempt_logs", "container")
