"""A project's storage hours: the bytes no Job bills, sampled once per ended hour (migration 0009, ADR 0034).

``project_storage_hours(namespace, project_uid, hour, bytes, amount, sampled_at, charged_at)`` holds
one row per ended hour ``n`` of a project: the bytes it kept at the end of the hour that no Job bills
(its blobs created before the end whose ``attributed_until`` is not after it), and what that hour
costs. Rows are written once (:func:`record`, ``ON CONFLICT DO NOTHING``), so the amount of an hour
never changes however often, or late, it is charged. ``charged_at`` is set (:func:`mark_charged`) once
the ledger holds the hour's charge; the ledger stays the truth (a crash between the two is a replay of
the same key on the next pass), and ``nodus billing verify`` checks that the two agree
(:func:`disagreements`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from nodus.storage.objects import Storage


@dataclass(frozen=True)
class Hour:
    """One sampled hour of a project's storage."""

    hour: int
    bytes: int
    amount: Decimal


async def now(storage: Storage) -> datetime:
    """The database's clock, which stamps ``blobs.created_at`` and ``referenced_at``."""
    async with storage._connection() as conn:
        value: datetime = await conn.fetchval("SELECT now()")
    return value


async def last_hour(storage: Storage, project_uid: str) -> int | None:
    """The latest hour sampled for the project (None: none yet)."""
    async with storage._connection() as conn:
        value = await conn.fetchval("SELECT max(hour) FROM project_storage_hours WHERE project_uid = $1", project_uid)
    return int(value) if value is not None else None


async def first_created(storage: Storage, namespace: str) -> datetime | None:
    """When the project's oldest blob row was created (None: it stores none)."""
    async with storage._connection() as conn:
        value: datetime | None = await conn.fetchval(
            "SELECT min(created_at) FROM blobs WHERE namespace = $1", namespace
        )
    return value


async def unattributed_bytes(storage: Storage, namespace: str, ends: Sequence[datetime]) -> list[int]:
    """For each instant of ``ends``: the bytes of the project's blobs created before it that no Job bills
    then (``attributed_until`` unset or not after it). Rows collected since are not counted: the
    collector samples an hour before it deletes anything in the next one."""
    if not ends:
        return []
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT e.n, (SELECT coalesce(sum(size), 0) FROM blobs WHERE namespace = $1 AND created_at < e.t "
            "AND (attributed_until IS NULL OR attributed_until <= e.t)) AS bytes "
            "FROM unnest($2::timestamptz[]) WITH ORDINALITY AS e(t, n) ORDER BY e.n",
            namespace,
            list(ends),
        )
    return [int(r["bytes"]) for r in rows]


async def record(storage: Storage, namespace: str, project_uid: str, hours: Sequence[Hour]) -> None:
    """Write the samples ``hours``; an hour sampled already keeps its first sample."""
    if not hours:
        return
    async with storage._connection() as conn:
        await conn.execute(
            "INSERT INTO project_storage_hours (namespace, project_uid, hour, bytes, amount) "
            "SELECT $1, $2, h, b, a FROM unnest($3::bigint[], $4::bigint[], $5::numeric[]) AS s(h, b, a) "
            "ON CONFLICT (project_uid, hour) DO NOTHING",
            namespace,
            project_uid,
            [h.hour for h in hours],
            [h.bytes for h in hours],
            [h.amount for h in hours],
        )


async def unpaid(storage: Storage, project_uid: str) -> list[Hour]:
    """The project's sampled hours with something to charge and no charge yet, oldest first."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT hour, bytes, amount FROM project_storage_hours "
            "WHERE project_uid = $1 AND amount > 0 AND charged_at IS NULL ORDER BY hour",
            project_uid,
        )
    return [Hour(int(r["hour"]), int(r["bytes"]), Decimal(r["amount"])) for r in rows]


async def owing(storage: Storage) -> list[tuple[str, str]]:
    """Every (namespace, project uid) with an hour still to charge, whatever it stores now."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT DISTINCT namespace, project_uid FROM project_storage_hours WHERE amount > 0 AND charged_at IS NULL"
        )
    return [(r["namespace"], r["project_uid"]) for r in rows]


async def mark_charged(storage: Storage, project_uid: str, hour: int) -> None:
    """The ledger holds the hour's charge."""
    async with storage._connection() as conn:
        await conn.execute(
            "UPDATE project_storage_hours SET charged_at = now() WHERE project_uid = $1 AND hour = $2 "
            "AND charged_at IS NULL",
            project_uid,
            hour,
        )


async def prune(storage: Storage, project_uid: str) -> None:
    """Forget the project's sampled hours that had nothing to charge, but the latest (where sampling
    resumes); an hour with an amount stays, for ``nodus billing verify``."""
    async with storage._connection() as conn:
        await conn.execute(
            "DELETE FROM project_storage_hours WHERE project_uid = $1 AND amount = 0 "
            "AND hour < (SELECT max(hour) FROM project_storage_hours WHERE project_uid = $1)",
            project_uid,
        )


async def owed(storage: Storage, project_uid: str) -> Decimal:
    """What the project's hours still to charge add up to."""
    async with storage._connection() as conn:
        value = await conn.fetchval(
            "SELECT coalesce(sum(amount), 0) FROM project_storage_hours "
            "WHERE project_uid = $1 AND amount > 0 AND charged_at IS NULL",
            project_uid,
        )
    return Decimal(value)


async def disagreements(storage: Storage, prefix: str) -> list[dict[str, Any]]:
    """Sampled hours the ledger disagrees with (for ``nodus billing verify``): marked charged but without
    a charge of exactly their amount under ``<prefix>:<project uid>:<hour>``, or charged but not marked."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT s.namespace, s.project_uid, s.hour, s.amount, s.charged_at IS NOT NULL AS marked, "
            "c.amount AS charged FROM project_storage_hours s "
            "LEFT JOIN ledger_transactions t ON t.key = $1 || ':' || s.project_uid || ':' || s.hour "
            "LEFT JOIN charges c ON c.transaction_id = t.id "
            "WHERE (s.charged_at IS NOT NULL AND (c.amount IS NULL OR c.amount <> s.amount)) "
            "OR (s.charged_at IS NULL AND c.amount IS NOT NULL)",
            prefix,
        )
    return [dict(r) for r in rows]


async def shown(storage: Storage) -> list[tuple[str, str, str]]:
    """Every Project's display copy ``status.storage.chargedUSD``: (name, uid, the amount shown)."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT name, uid, body::jsonb->'status'->'storage'->>'chargedUSD' AS charged FROM objects "
            "WHERE kind = 'Project' AND body::jsonb->'status'->'storage' ? 'chargedUSD'"
        )
    return [(r["name"], r["uid"], r["charged"]) for r in rows]


async def displaying(storage: Storage) -> list[str]:
    """Projects whose ``status.storage`` shows bytes or a debt: a project that stores nothing and owes
    nothing any more is passed over once more, so that its display copy says so."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "SELECT name FROM objects WHERE kind = 'Project' AND ("
            "(body::jsonb->'status'->'storage'->>'bytes')::bigint > 0 "
            "OR (body::jsonb->'status'->'storage'->>'billedBytes')::bigint > 0 "
            "OR body::jsonb->'status'->'storage' ? 'owedUSD')"
        )
    return [r["name"] for r in rows]
