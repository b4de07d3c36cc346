"""Blobs: content-addressed bytes (``sha256:<hex>``) per project, stored in PostgreSQL in 1 MiB chunks.

``blob_chunks`` holds the bytes of one upload (``upload_id``) in order (``seq`` from 0); every chunk
but the last is exactly 1 MiB. ``data`` is stored EXTERNAL: out of line, never compressed (what is
uploaded is mostly compressed already, and uncompressed out-of-line values can be sliced cheaply).
``blobs`` names a digest in a project and points at the upload that holds its bytes; several
projects' rows may point at one upload (deduplication). See ``nodus.storage.blobs``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blob_chunks",
        sa.Column("upload_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("upload_id", "seq", name="pk_blob_chunks"),
    )
    op.execute("ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
    op.create_table(
        "blobs",
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("media_type", sa.Text, nullable=False),
        sa.Column("upload_id", pg.UUID(as_uuid=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("namespace", "digest", name="pk_blobs"),
    )
    # Deduplication looks a digest up across projects; a future sweep looks uploads up by id.
    op.create_index("ix_blobs_digest", "blobs", ["digest"])
    op.create_index("ix_blobs_upload_id", "blobs", ["upload_id"])


def downgrade() -> None:
    op.drop_table("blobs")
    op.drop_table("blob_chunks")
