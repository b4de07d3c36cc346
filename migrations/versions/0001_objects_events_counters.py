"""Objects, the watch log and the resourceVersion counters.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "objects",
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("rv", sa.BigInteger, nullable=False),
        sa.Column("labels", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("phase", sa.Text, nullable=True),
        sa.Column("owner_uids", pg.ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("deleting", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("body", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("kind", "namespace", "name", name="pk_objects"),
        sa.UniqueConstraint("uid", name="uq_objects_uid"),
    )
    op.create_index("ix_objects_owner_uids", "objects", ["owner_uids"], postgresql_using="gin")
    op.create_index("ix_objects_labels", "objects", ["labels"], postgresql_using="gin")
    op.create_index(
        "ix_objects_kind_deleting", "objects", ["kind", "deleting"], postgresql_where=sa.text("deleting")
    )
    op.create_table(
        "events",
        sa.Column("rv", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("labels", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("phase", sa.Text, nullable=True),
        sa.Column("prev_body", sa.Text, nullable=True),
        sa.Column("prev_labels", pg.JSONB, nullable=True),
        sa.Column("prev_phase", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("rv", name="pk_events"),
    )
    op.create_index("ix_events_kind_namespace_name_rv", "events", ["kind", "namespace", "name", "rv"])
    op.create_index("ix_events_created_at", "events", ["created_at"])
    op.create_table(
        "counters",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("value", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_counters"),
    )
    op.execute("INSERT INTO counters (key, value) VALUES ('rv', 1), ('compacted_rv', 0)")


def downgrade() -> None:
    op.drop_table("counters")
    op.drop_index("ix_events_created_at", table_name="events")
    op.drop_index("ix_events_kind_namespace_name_rv", table_name="events")
    op.drop_table("events")
    op.drop_index("ix_objects_kind_deleting", table_name="objects")
    op.drop_index("ix_objects_labels", table_name="objects")
    op.drop_index("ix_objects_owner_uids", table_name="objects")
    op.drop_table("objects")
