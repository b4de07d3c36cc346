"""Blob bytes move to the object store (``--blob-store``): the ``blob_chunks`` table goes.

``blobs`` keeps naming each project's digests; ``upload_id`` now names the object
``uploads/<upload_id>`` in the object store (``nodus.storage.objectstore``). Bytes stored in
``blob_chunks`` by 0003 are not copied over: no release stored blobs that way.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("blob_chunks")


def downgrade() -> None:
    op.create_table(
        "blob_chunks",
        sa.Column("upload_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("upload_id", "seq", name="pk_blob_chunks"),
    )
    op.execute("ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
