"""Connection (``connections.nodus.dev``): an S3 bucket or PostgreSQL database a Job may use, and the Secret
that holds its credential.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel

ConnectionType = Literal["S3", "Postgres", "Neon", "Supabase"]
POSTGRES_TYPES = frozenset({"Postgres", "Neon", "Supabase"})
DEFAULT_DSN_KEY = "dsn"
S3_KEYS = ("accessKeyID", "secretAccessKey")
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class S3Connection(WireModel):
    """S3Connection locates a bucket on an S3-compatible endpoint."""

    endpoint: str = Field(
        min_length=1,
        description="Endpoint is the service URL, such as https://s3.us-east-1.amazonaws.com; http only for "
        "localhost or 127.0.0.1.",
    )
    region: str | None = Field(None, min_length=1, description="Region is the bucket's region, such as us-east-1.")
    bucket: str = Field(min_length=1, description="Bucket is the bucket's name.")
    credentials_secret: str = Field(
        min_length=1,
        description="CredentialsSecret names a Secret in the same project with the keys accessKeyID and "
        "secretAccessKey (and optionally sessionToken).",
    )


class PostgresConnection(WireModel):
    """PostgresConnection names the Secret that holds a PostgreSQL connection string."""

    dsn_secret: str = Field(
        min_length=1, description="DSNSecret names a Secret in the same project that holds the connection string."
    )
    dsn_key: str | None = Field(
        None, min_length=1, description=f"DSNKey is the Secret's key holding it (default {DEFAULT_DSN_KEY})."
    )


class ConnectionSpec(WireModel):
    """ConnectionSpec says what kind of store it is and where; exactly the block of its type is set."""

    type: ConnectionType = Field(description="Type is S3, Postgres, Neon or Supabase (the last two are Postgres).")
    s3: S3Connection | None = Field(None, description="S3 is set when type is S3.")
    postgres: PostgresConnection | None = Field(
        None, description="Postgres is set when type is Postgres, Neon or Supabase."
    )
