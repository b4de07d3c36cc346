"""A batch of writes commits in one statement (ADR 0056), through the real database.

Writes submitted together, before the committer's task runs again, form one batch: the tests submit them all
at once and check the committer counted exactly one batch. The stored text of every body is compared byte for
byte with the body the write returned, encoded here.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson
import pytest

from nodus.storage import committing, rows
from nodus.storage.committing import Committer, Write
from nodus.storage.errors import AlreadyExists, Conflict, Key, NotFound, StorageError
from nodus.storage.objects import Storage
from nodus.storage.progresssamples import Sample, samples
from tests.storage.conftest import job, unique_namespace


async def one_batch(
    committer: Committer, writes: list[Write], committed: int = 1
) -> list[dict[str, Any] | BaseException]:
    """Submit ``writes`` together and wait for them; they must have gone in one batch, which commits (``committed``
    is 1), or fails and is retried write by write (each retry that commits counts a batch)."""
    before = committer.batches
    results = await asyncio.gather(*(committer.submit(write) for write in writes), return_exceptions=True)
    assert committer.batches == before + committed, "the writes were not committed in one batch"
    return results


async def row(storage: Storage, table: str, **where: Any) -> asyncpg.Record | None:
    condition = " AND ".join(f"{column} = ${i}" for i, column in enumerate(where, 1))
    async with storage._connection() as conn:
        return await conn.fetchrow(f"SELECT * FROM {table} WHERE {condition}", *where.values())  # type: ignore[no-any-return]


async def counter(storage: Storage) -> int:
    return await storage.current_rv()


async def event_count(storage: Storage, namespace: str) -> int:
    async with storage._connection() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM events WHERE namespace = $1", namespace)
    return count


def key_of(body: dict[str, Any]) -> Key:
    return Key("Job", body["metadata"]["namespace"], body["metadata"]["name"])


def rv_of(body: dict[str, Any]) -> int:
    return int(body["metadata"]["resourceVersion"])


async def assert_stored(storage: Storage, body: dict[str, Any]) -> asyncpg.Record:
    """The object row holds ``body`` byte for byte, at the resourceVersion its body names; returns the row."""
    key = key_of(body)
    stored = await row(storage, "objects", kind=key.kind, namespace=key.namespace, name=key.name)
    assert stored is not None
    assert stored["body"] == rows.encode(body)
    assert orjson.loads(stored["body"])["metadata"]["resourceVersion"] == str(stored["rv"])
    assert stored["rv"] == rv_of(body)
    assert stored["labels"] == rows.labels_of(body)
    assert stored["phase"] == rows.phase_of(body)
    assert list(stored["owner_uids"]) == rows.owner_uids_of(body)
    assert stored["deleting"] == rows.deleting(body)
    return stored


def updated(body: dict[str, Any], **labels: str) -> dict[str, Any]:
    new = copy.deepcopy(body)
    new["metadata"]["labels"].update(labels)
    new["status"] = {"phase": "Running"}
    return new


async def test_a_batch_gives_consecutive_versions_to_its_applied_writes_only(storage: Storage) -> None:
    namespace = unique_namespace()
    existing = await storage.create(Key("Job", namespace, "existing"), job(namespace, "existing"))
    stale = await storage.create(Key("Job", namespace, "stale"), job(namespace, "stale", {"v": "0"}))
    changed = await storage.create(Key("Job", namespace, "changed"), job(namespace, "changed", {"v": "0"}, "Pending"))
    removed = await storage.create(Key("Job", namespace, "removed"), job(namespace, "removed", {"a": "b"}, "Failed"))
    stale_now = await storage.update(key_of(stale), updated(stale, v="1"), rv_of(stale))
    before_events = await event_count(storage, namespace)
    head = await counter(storage)

    owned = job(namespace, "owned")
    owned["metadata"]["ownerReferences"] = [
        {"uid": "owner-b", "kind": "Job", "name": "b"},
        {"uid": "owner-a", "kind": "Job", "name": "a"},
    ]
    duplicate = job(namespace, "existing")
    duplicate["metadata"]["resourceVersion"] = "untouched"
    conflicting = updated(stale, v="2")
    changed_new = updated(changed, v="1")
    changed_new["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    removed_final = copy.deepcopy(removed)
    writes = [
        Write("create", key_of(duplicate), duplicate),  # exists
        Write("create", key_of(owned), owned),  # applied: head + 1
        Write("update", key_of(conflicting), conflicting, rv_of(stale)),  # conflict: the object moved on
        Write("update", key_of(changed_new), changed_new, rv_of(changed)),  # applied: head + 2
        Write("delete", Key("Job", namespace, "missing"), job(namespace, "missing"), 1),  # not found
        Write("delete", key_of(removed_final), removed_final, rv_of(removed)),  # applied: head + 3
        Write("update", Key("Job", namespace, "absent"), job(namespace, "absent"), None),  # not found
        Write("create", Key("Job", namespace, "last"), job(namespace, "last", {"x": "y"}, "Pending")),  # head + 4
    ]
    results = await one_batch(storage.committer, writes)

    assert isinstance(results[0], AlreadyExists)
    assert isinstance(results[2], Conflict)
    assert results[2].current_rv == rv_of(stale_now)
    assert isinstance(results[4], NotFound)
    assert isinstance(results[6], NotFound)
    applied = [results[i] for i in (1, 3, 5, 7)]
    assert all(isinstance(result, dict) for result in applied)
    assert [rv_of(result) for result in applied] == [head + 1, head + 2, head + 3, head + 4]  # type: ignore[arg-type]
    assert await counter(storage) == head + 4
    # A write that is not applied keeps the resourceVersion its body had.
    assert duplicate["metadata"]["resourceVersion"] == "untouched"
    assert conflicting["metadata"]["resourceVersion"] == stale["metadata"]["resourceVersion"]

    owned_row = await assert_stored(storage, owned)
    assert list(owned_row["owner_uids"]) == ["owner-b", "owner-a"]
    await assert_stored(storage, changed_new)
    await assert_stored(storage, writes[7].body)
    assert await storage.get(key_of(removed)) is None
    assert await storage.get(key_of(existing)) == existing
    assert await storage.get(key_of(stale)) == stale_now

    assert await event_count(storage, namespace) == before_events + 4
    added = await row(storage, "events", rv=head + 1)
    assert added is not None
    assert (added["kind"], added["namespace"], added["name"], added["type"]) == ("Job", namespace, "owned", "ADDED")
    assert (added["body"], added["labels"], added["phase"]) == (rows.encode(owned), {}, None)
    assert (added["prev_body"], added["prev_labels"], added["prev_phase"]) == (None, None, None)
    modified = await row(storage, "events", rv=head + 2)
    assert modified is not None
    assert (modified["name"], modified["type"]) == ("changed", "MODIFIED")
    assert (modified["body"], modified["labels"], modified["phase"]) == (
        rows.encode(changed_new),
        {"v": "1"},
        "Running",
    )
    assert (modified["prev_body"], modified["prev_labels"], modified["prev_phase"]) == (
        rows.encode(changed),
        {"v": "0"},
        "Pending",
    )
    deleted = await row(storage, "events", rv=head + 3)
    assert deleted is not None
    assert (deleted["name"], deleted["type"]) == ("removed", "DELETED")
    assert deleted["body"] == rows.encode(removed_final)
    assert orjson.loads(deleted["body"])["metadata"]["resourceVersion"] == str(head + 3)
    assert (deleted["labels"], deleted["phase"]) == ({"a": "b"}, "Failed")
    assert (deleted["prev_body"], deleted["prev_labels"], deleted["prev_phase"]) == (
        rows.encode(removed),
        {"a": "b"},
        "Failed",
    )
    last = await row(storage, "events", rv=head + 4)
    assert last is not None
    assert (last["name"], last["type"], last["labels"], last["phase"]) == ("last", "ADDED", {"x": "y"}, "Pending")


async def test_a_batch_that_applies_nothing_leaves_the_counter(storage: Storage) -> None:
    namespace = unique_namespace()
    existing = await storage.create(Key("Job", namespace, "existing"), job(namespace, "existing"))
    head = await counter(storage)
    events = await event_count(storage, namespace)
    results = await one_batch(
        storage.committer,
        [
            Write("create", key_of(existing), job(namespace, "existing")),
            Write("update", key_of(existing), copy.deepcopy(existing), rv_of(existing) - 1),
            Write("delete", Key("Job", namespace, "missing"), job(namespace, "missing"), None),
        ],
    )
    assert [type(result) for result in results] == [AlreadyExists, Conflict, NotFound]
    assert await counter(storage) == head
    assert await event_count(storage, namespace) == events
    assert await storage.get(key_of(existing)) == existing


TENANT_TEXTS = [
    '"resourceVersion":"1"',
    '","resourceVersion":"999999"}',
    "resourceVersion",
    "0" * 32,
    uuid.uuid4().hex,
    "%s {} $1 || ' \\",
]


async def test_text_a_tenant_writes_cannot_move_the_stored_resource_version(storage: Storage) -> None:
    namespace = unique_namespace()
    labels = {f"l{i}": text[:63] for i, text in enumerate(TENANT_TEXTS)}
    body = job(namespace, "tricky", labels)
    body["metadata"]["annotations"] = {text: text for text in TENANT_TEXTS}
    body["spec"]["args"] = [*TENANT_TEXTS, {"metadata": {"resourceVersion": "7"}}]
    body["metadata"]["resourceVersion"] = '","resourceVersion":"5'
    created = await storage.create(key_of(body), copy.deepcopy(body))
    await assert_stored(storage, created)
    again = copy.deepcopy(created)
    again["spec"]["args"].append('"resourceVersion":"' + created["metadata"]["resourceVersion"] + '"')
    result = await storage.update(key_of(again), again, rv_of(created))
    stored = await assert_stored(storage, result)
    read = orjson.loads(stored["body"])
    assert read["metadata"]["labels"] == labels
    assert read["metadata"]["annotations"] == {text: text for text in TENANT_TEXTS}
    assert read["spec"]["args"] == again["spec"]["args"]


async def test_a_sentinel_found_elsewhere_in_the_body_is_drawn_again(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = unique_namespace()
    planted = uuid.uuid4().hex
    drawn = iter([planted, uuid.uuid4().hex])  # first the tenant's own text, then a fresh one
    monkeypatch.setattr(committing, "_sentinel", lambda: next(drawn))
    body = job(namespace, "planted")
    body["spec"]["args"] = [planted, f"prefix-{planted}-suffix"]
    created = await storage.create(key_of(body), body)
    await assert_stored(storage, created)
    assert created["spec"]["args"] == [planted, f"prefix-{planted}-suffix"]
    assert next(drawn, None) is None, "the sentinel was not drawn again"


class Failing:
    """A companion the database refuses."""

    async def write(self, conn: asyncpg.Connection, stored: dict[str, Any]) -> None:
        await conn.execute("SELECT 1/0")


async def test_companions_commit_with_their_write_in_a_batch(storage: Storage) -> None:
    namespace = unique_namespace()
    existing = await storage.create(Key("Job", namespace, "existing"), job(namespace, "existing", phase="Running"))
    head = await counter(storage)
    sampled = updated(existing)
    results = await one_batch(
        storage.committer,
        [
            Write("create", key_of(existing), job(namespace, "existing")),  # exists
            Write("create", Key("Job", namespace, "new"), job(namespace, "new"), companions=(Sample(1, 10),)),
            Write("update", key_of(existing), sampled, rv_of(existing), (Sample(2, 10, {"loss": "0.5"}),)),
            Write("update", key_of(existing), copy.deepcopy(existing), rv_of(existing)),  # conflict now
            Write("create", Key("Job", namespace, "plain"), job(namespace, "plain")),
        ],
    )
    assert isinstance(results[0], AlreadyExists)
    assert isinstance(results[3], Conflict) and results[3].current_rv == head + 2
    new, changed, plain = results[1], results[2], results[4]
    assert isinstance(new, dict) and isinstance(changed, dict) and isinstance(plain, dict)
    assert [rv_of(new), rv_of(changed), rv_of(plain)] == [head + 1, head + 2, head + 3]
    for body in (new, changed, plain):
        await assert_stored(storage, body)
    assert [(s.completed, s.total) for s in await samples(storage, new["metadata"]["uid"])] == [(1, 10)]
    kept = await samples(storage, existing["metadata"]["uid"])
    assert [(s.completed, s.metrics) for s in kept] == [(2, {"loss": "0.5"})]
    async with storage._connection() as conn:
        rvs = await conn.fetch(
            "SELECT job_uid, rv FROM progress_samples WHERE job_uid = ANY($1::text[])",
            [new["metadata"]["uid"], existing["metadata"]["uid"]],
        )
    assert {(r["job_uid"], r["rv"]) for r in rvs} == {
        (new["metadata"]["uid"], head + 1),
        (existing["metadata"]["uid"], head + 2),
    }


async def test_a_failing_companion_fails_only_its_write(storage: Storage) -> None:
    namespace = unique_namespace()
    results = await one_batch(
        storage.committer,
        [
            Write("create", Key("Job", namespace, "a"), job(namespace, "a")),
            Write("create", Key("Job", namespace, "broken"), job(namespace, "broken"), companions=(Failing(),)),
            Write("create", Key("Job", namespace, "b"), job(namespace, "b")),
        ],
        committed=2,  # the batch fails; "a" and "b" are retried alone and commit
    )
    assert isinstance(results[1], StorageError) and not isinstance(results[1], AlreadyExists)
    assert await storage.get(Key("Job", namespace, "broken")) is None
    first, second = results[0], results[2]
    assert isinstance(first, dict) and isinstance(second, dict)
    await assert_stored(storage, first)
    await assert_stored(storage, second)
    assert rv_of(second) > rv_of(first)


async def test_a_write_that_breaks_a_batch_in_one_call_fails_alone(storage: Storage) -> None:
    namespace = unique_namespace()
    taken = await storage.create(Key("Job", namespace, "taken"), job(namespace, "taken"))
    thief = job(namespace, "thief")
    thief["metadata"]["uid"] = taken["metadata"]["uid"]  # the uid is unique: the database refuses the batch
    thief["metadata"]["resourceVersion"] = "as-sent"
    results = await one_batch(
        storage.committer,
        [
            Write("create", Key("Job", namespace, "a"), job(namespace, "a")),
            Write("create", key_of(thief), thief),
            Write("create", Key("Job", namespace, "b"), job(namespace, "b")),
        ],
        committed=2,  # the batch fails; "a" and "b" are retried alone and commit
    )
    assert isinstance(results[1], StorageError) and not isinstance(results[1], AlreadyExists)
    assert thief["metadata"]["resourceVersion"] == "as-sent"
    assert await storage.get(key_of(thief)) is None
    first, second = results[0], results[2]
    assert isinstance(first, dict) and isinstance(second, dict)
    await assert_stored(storage, first)
    await assert_stored(storage, second)
    assert rv_of(second) == rv_of(first) + 1


@asynccontextmanager
async def logged(storage: Storage, statements: list[str]) -> AsyncIterator[Any]:
    """A connection of ``storage`` that appends each statement it runs to ``statements``."""

    def log(query: Any) -> None:
        # Not asyncpg's own introspection of the types of a statement (once per connection, JIT off around it).
        if "typeinfo_tree" not in query.query and "set_config('jit'" not in query.query:
            statements.append(query.query)

    async with storage._connection() as conn:
        conn.add_query_logger(log)
        try:
            yield conn
        finally:
            conn.remove_query_logger(log)


@pytest.fixture
def statements(storage: Storage) -> Iterator[tuple[Committer, list[str]]]:
    sent: list[str] = []
    yield Committer(lambda: logged(storage, sent)), sent


async def test_a_batch_without_companions_is_one_statement(statements: tuple[Committer, list[str]]) -> None:
    committer, sent = statements
    committer.start()
    try:
        namespace = unique_namespace()
        results = await one_batch(
            committer, [Write("create", Key("Job", namespace, f"j{i}"), job(namespace, f"j{i}")) for i in range(5)]
        )
        assert all(isinstance(result, dict) for result in results)
        assert len(sent) == 1 and "nodus_commit_batch" in sent[0]
        sent.clear()
        job_body = results[0]
        assert isinstance(job_body, dict)
        await one_batch(
            committer, [Write("update", key_of(job_body), updated(job_body), rv_of(job_body), (Sample(1, None),))]
        )
        assert len(sent) > 1 and not any("nodus_commit_batch" in statement for statement in sent)
    finally:
        await committer.stop()
