"""Budgets in the ledger: which holds count against which Budget, and since when (ADR 0018).

* ``budget_holds(hold_id, budget, since, until)``: hold ``hold_id`` counted against the Budget whose
  uid is ``budget`` from ``since`` until ``until`` (NULL: still does). A hold is tagged with the Budgets
  its Job matches when it is placed, and re-tagged when it is extended for the Job's funding: a tag
  the Job no longer matches is closed (``until`` set), a new match opens a tag. A charge on the hold
  counts against the Budgets whose tag was open when it was posted; what the hold holds now counts
  against its open tags. History is never rewritten, so what a Budget was charged stays charged.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budget_holds",
        sa.Column("hold_id", sa.Text, nullable=False),
        sa.Column("budget", sa.Text, nullable=False),
        sa.Column("project", sa.Text, nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("hold_id", "budget", "since", name="pk_budget_holds"),
        sa.CheckConstraint("until IS NULL OR until >= since", name="ck_budget_holds_interval"),
    )
    op.create_index("ix_budget_holds_budget", "budget_holds", ["budget"])
    # At most one open tag per hold and budget.
    op.create_index(
        "ix_budget_holds_open",
        "budget_holds",
        ["hold_id", "budget"],
        unique=True,
        postgresql_where=sa.text("until IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("budget_holds")
