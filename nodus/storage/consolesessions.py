"""The web console's session and login-code rows (migration 0011, ADR 0053).

Rows are keyed by the SHA-256 of a secret the browser or the person holds, never by the secret: the
service (``nodus.api.consolesessions``) hashes before it calls here. Times are the caller's clock,
passed in, so that expiry is decided by one clock (the API server's) and tests can set it.

A login code is redeemed by deleting its row (:func:`take_code`): of two concurrent redeems of the
same code, PostgreSQL lets exactly one ``DELETE ... RETURNING`` see the row, so a code logs in once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from nodus.storage.objects import Storage


@dataclass(frozen=True)
class StoredPrincipal:
    """Who a session or code logs in as, as the API server authenticated them."""

    user: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class SessionRow:
    principal: StoredPrincipal
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True)
class CodeRow:
    principal: StoredPrincipal
    expires_at: datetime


def _principal(row: Mapping[str, Any]) -> StoredPrincipal:
    extra = row["extra"] or {}
    return StoredPrincipal(
        user=row["user_name"],
        uid=row["uid"],
        groups=tuple(row["groups"]),
        extra={str(k): tuple(str(v) for v in values) for k, values in extra.items()},
    )


def _extra(principal: StoredPrincipal) -> str:
    return orjson.dumps({k: list(v) for k, v in principal.extra.items()}).decode()


async def insert_session(
    storage: Storage,
    id_hash: str,
    principal: StoredPrincipal,
    csrf_token: str,
    created_at: datetime,
    expires_at: datetime,
) -> None:
    async with storage._connection() as conn:
        await conn.execute(
            "INSERT INTO console_sessions (id_hash, user_name, uid, groups, extra, csrf_token, created_at, expires_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            id_hash,
            principal.user,
            principal.uid,
            list(principal.groups),
            _extra(principal),
            csrf_token,
            created_at,
            expires_at,
        )


async def live_session(storage: Storage, id_hash: str, now: datetime) -> SessionRow | None:
    """The session whose cookie hashes to ``id_hash``, unless there is none or it expired at or before ``now``."""
    async with storage._connection() as conn:
        row = await conn.fetchrow(
            "SELECT user_name, uid, groups, extra, csrf_token, expires_at FROM console_sessions "
            "WHERE id_hash = $1 AND expires_at > $2",
            id_hash,
            now,
        )
    if row is None:
        return None
    return SessionRow(_principal(row), row["csrf_token"], row["expires_at"])


async def delete_session(storage: Storage, id_hash: str) -> bool:
    """Remove the session; whether there was one."""
    async with storage._connection() as conn:
        deleted = await conn.fetchval("DELETE FROM console_sessions WHERE id_hash = $1 RETURNING 1", id_hash)
    return deleted is not None


async def insert_code(
    storage: Storage, code_hash: str, principal: StoredPrincipal, created_at: datetime, expires_at: datetime
) -> None:
    async with storage._connection() as conn:
        await conn.execute(
            "INSERT INTO console_login_codes (code_hash, user_name, uid, groups, extra, created_at, expires_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            code_hash,
            principal.user,
            principal.uid,
            list(principal.groups),
            _extra(principal),
            created_at,
            expires_at,
        )


async def take_code(storage: Storage, code_hash: str) -> CodeRow | None:
    """Delete the code and return what it held (None: no such code, or another redeem took it first).
    An expired code is deleted too; the caller compares ``expires_at`` with its clock."""
    async with storage._connection() as conn:
        row = await conn.fetchrow(
            "DELETE FROM console_login_codes WHERE code_hash = $1 RETURNING user_name, uid, groups, extra, expires_at",
            code_hash,
        )
    if row is None:
        return None
    return CodeRow(_principal(row), row["expires_at"])


async def delete_expired(storage: Storage, now: datetime) -> tuple[int, int]:
    """Remove the sessions and codes that expired at or before ``now``: (sessions, codes) removed."""
    async with storage._connection() as conn:
        sessions = await conn.fetchval(
            "WITH gone AS (DELETE FROM console_sessions WHERE expires_at <= $1 RETURNING 1) SELECT count(*) FROM gone",
            now,
        )
        codes = await conn.fetchval(
            "WITH gone AS (DELETE FROM console_login_codes WHERE expires_at <= $1 RETURNING 1) "
            "SELECT count(*) FROM gone",
            now,
        )
    return int(sessions), int(codes)
