"""Statements name what each movement paid for (ADR 0038).

A hold's movements (the Hold, its extensions, captures, refunds and release) carry the hold's id as their
subject: the Attempt's uid. The Attempt goes with its Job, so the API server writes its name (``attempt/NAME``)
in the memo of the hold's ``Hold`` posting when it makes it, and a statement looks it up by subject. This
index makes that lookup one probe per line; it is partial (only ``Hold`` postings, one per attempt), so the
ledger's hot inserts (captures) do not maintain it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_ledger_transactions_hold_subject",
        "ledger_transactions",
        ["subject"],
        postgresql_where=sa.text("kind = 'Hold'"),
    )


def downgrade() -> None:
    op.drop_index("ix_ledger_transactions_hold_subject", table_name="ledger_transactions")
