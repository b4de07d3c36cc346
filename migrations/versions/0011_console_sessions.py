"""The web console's sessions and one-time login codes (ADR 0053).

* ``console_sessions(id_hash, user_name, uid, groups, extra, csrf_token, created_at, expires_at)``: one row
  per browser session. ``id_hash`` is the SHA-256 (hex) of the ``nodus-session`` cookie's value; the value
  itself is never stored, so a copy of the table logs no one in. The row holds the principal as it was
  authenticated at login and the session's CSRF token.
* ``console_login_codes(code_hash, user_name, uid, groups, extra, created_at, expires_at)``: single-use codes
  that ``nodus console`` and ``nodus dev`` print (``/console/login?code=...``); again only the hash is kept.
  Redeeming deletes the row, so a code logs in at most once.

Both are swept by ``expires_at`` (the index), on a timer in every API server.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _principal_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("groups", pg.ARRAY(sa.Text), nullable=False),
        sa.Column("extra", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    ]


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.Text, nullable=False),
        *_principal_columns(),
        sa.Column("csrf_token", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name="pk_console_sessions"),
    )
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_table(
        "console_login_codes",
        sa.Column("code_hash", sa.Text, nullable=False),
        *_principal_columns(),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("code_hash", name="pk_console_login_codes"),
    )
    op.create_index("ix_console_login_codes_expires_at", "console_login_codes", ["expires_at"])


def downgrade() -> None:
    op.drop_table("console_login_codes")
    op.drop_table("console_sessions")
