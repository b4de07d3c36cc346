"""The Projects view (ADR 0057) on the real PostgreSQL, in-process: it lists, then applies every Project event in
order; a process reads its own writes back at once; a miss is the database's to answer; a view whose cache lost
events stops answering and lists again; and it answers membership as the database's JSON containment did."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest

from nodus.api.projectview import ProjectView
from nodus.storage import database
from nodus.storage.errors import Key
from nodus.storage.listing import ListCursor, ListQuery
from nodus.storage.objects import Storage
from tests.storage.test_watch_cache_gaps import held, until


@pytest.fixture(scope="module")
def own_database(database_server: str) -> Iterator[str]:
    """A database of this module's own: its compaction must not expire other tests' watches, and its Projects
    are all the view holds."""
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    yield url
    asyncio.run(database.drop_database(url))


@pytest.fixture
async def storage(own_database: str) -> AsyncIterator[Storage]:
    store = Storage(own_database, pool_size=6, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


@pytest.fixture
async def other(own_database: str) -> AsyncIterator[Storage]:
    """Another API server process's storage on the same database (its compaction keeps nothing)."""
    store = Storage(own_database, pool_size=6, compaction_interval=3600, retention=timedelta(0))
    await store.start()
    yield store
    await store.stop()


@pytest.fixture
async def view(storage: Storage) -> AsyncIterator[ProjectView]:
    projects = ProjectView(storage)
    await projects.start()
    assert projects.synced
    yield projects
    await projects.stop()


def project(name: str, *members: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Project",
        "metadata": {"name": name, "uid": str(uuid.uuid4()), **metadata},
        "spec": {"members": [{"name": m, "role": "Editor"} for m in members]},
    }


def name() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


async def create(store: Storage, body: dict[str, Any]) -> dict[str, Any]:
    return await store.create(Key("Project", "", body["metadata"]["name"]), body)


async def replace(store: Storage, current: dict[str, Any], *members: str) -> dict[str, Any]:
    body = dict(current, spec={"members": [{"name": m, "role": "Editor"} for m in members]})
    key = Key("Project", "", current["metadata"]["name"])
    return await store.update(key, body, int(current["metadata"]["resourceVersion"]))


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


async def test_it_lists_then_applies_every_event_in_order(storage: Storage, other: Storage, view: ProjectView) -> None:
    kept, gone, steps = name(), name(), name()
    alice, group, user = (f"{who}-{uuid.uuid4().hex[:6]}" for who in ("alice", "group:ml", "user"))
    await create(storage, project(kept, alice))
    doomed = await create(storage, project(gone, alice, group))
    stepped = await create(other, project(steps, "bob"))
    for step in range(20):  # another process's writes, each applied after the one before
        stepped = await replace(other, stepped, "bob", f"{user}-{step}")
    await storage.delete(Key("Project", "", gone), doomed, rv(doomed))
    assert await storage.watch_cache.wait_for_head(rv(stepped), 5.0)
    reads = view.database_reads
    assert (await view.get(steps) or {})["metadata"]["resourceVersion"] == str(rv(stepped))
    assert await view.names_with_member([f"{user}-19"]) == {steps}
    assert await view.names_with_member([f"{user}-18"]) == frozenset(), "an older version's member is gone"
    assert await view.names_with_member([alice, group]) == {kept}
    assert view.database_reads == reads, "answered from memory"
    assert await view.get(gone) is None
    assert view.database_reads == reads + 1, "a miss is the database's to answer"


async def test_events_around_the_first_list_are_applied_once(
    storage: Storage, other: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view subscribes, then lists: an event between the two is in the list (and skipped when held), one
    while the list is read is held and applied after it."""
    carol = f"carol-{uuid.uuid4().hex[:6]}"
    early, doomed, late = name(), await create(other, project(name(), carol)), name()
    listing = storage.open_list

    @contextlib.asynccontextmanager
    async def writes_around(query: ListQuery) -> AsyncIterator[ListCursor]:
        made = await create(other, project(early, carol))
        assert await storage.watch_cache.wait_for_head(rv(made), 5.0)  # held, and in the list
        async with listing(query) as cursor:  # the snapshot is taken here
            await other.delete(Key("Project", "", doomed["metadata"]["name"]), doomed, rv(doomed))
            made = await create(other, project(late, carol))
            assert await storage.watch_cache.wait_for_head(rv(made), 5.0)  # held, not in the list
            yield cursor

    monkeypatch.setattr(storage, "open_list", writes_around)
    projects = ProjectView(storage)
    await projects.start()
    try:
        assert projects.synced
        assert await projects.names_with_member([carol]) == {early, late}
        assert projects.database_reads == 0
    finally:
        await projects.stop()


async def test_its_own_writes_are_read_back_at_once(storage: Storage, view: ProjectView) -> None:
    current = await create(storage, project(name(), "alice"))
    reads = view.database_reads
    member = f"member-{uuid.uuid4().hex[:6]}"
    for step in range(20):
        current = await replace(storage, current, f"{member}-{step}")
        # No waiting here: the view waits for the cache to reach this process's write.
        assert await view.get(current["metadata"]["name"]) == current
        assert await view.names_with_member([f"{member}-{step}"]) == {current["metadata"]["name"]}
    assert view.database_reads == reads, "answered from memory once the cache had the write"


async def test_a_project_another_process_just_created_is_found(
    storage: Storage, other: Storage, view: ProjectView, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh, dave = name(), f"dave-{uuid.uuid4().hex[:6]}"
    async with held(storage, monkeypatch):  # this process has not read the other's write yet
        created = await create(other, project(fresh, dave))
        assert await view.get(fresh) == created, "a miss reads the database before it is NotFound"
        assert await view.get(name()) is None
        assert await view.names_with_member([dave]) == frozenset(), "membership arrives through the watch"
    await until(lambda: storage.watch_cache.head >= rv(created))
    assert await view.names_with_member([dave]) == {fresh}


async def test_a_view_whose_cache_lost_events_lists_again(
    storage: Storage, other: Storage, view: ProjectView, monkeypatch: pytest.MonkeyPatch
) -> None:
    left, added, erin = name(), name(), f"erin-{uuid.uuid4().hex[:6]}"
    before = await create(storage, project(left, erin))
    assert await view.names_with_member([erin]) == {left}
    async with held(storage, monkeypatch):
        # Erin leaves and a project is added, and the log is compacted before this process reads either event.
        await replace(other, before)
        await create(other, project(added, erin))
        await other.compact()
    await until(lambda: view.lists == 2 and view.synced)
    assert storage.watch_cache.losses == 1
    reads = view.database_reads
    assert await view.names_with_member([erin]) == {added}
    assert view.database_reads == reads, "answered from the new list, not the database"
    # And it is fed again from there on.
    later = await create(other, project(name(), erin))
    await until(lambda: storage.watch_cache.head >= rv(later))
    assert await view.names_with_member([erin]) == {added, later["metadata"]["name"]}


async def test_until_synced_the_database_answers(storage: Storage) -> None:
    frank = f"frank-{uuid.uuid4().hex[:6]}"
    fresh = await create(storage, project(name(), frank))
    projects = ProjectView(storage)  # not started
    assert await projects.get(fresh["metadata"]["name"]) == fresh
    assert await projects.names_with_member([frank]) == {fresh["metadata"]["name"]}
    assert projects.database_reads == 2


@pytest.mark.parametrize(
    "members",
    [
        pytest.param([{"name": "x", "role": "Nonsense"}], id="any-role"),
        pytest.param([{"name": "x"}, "x", {"name": ["x"]}, {"name": 7}], id="odd-entries"),
        pytest.param("x", id="members-not-a-list"),
        pytest.param([{"role": "Owner"}], id="no-name"),
    ],
)
async def test_membership_is_the_databases_json_containment(storage: Storage, view: ProjectView, members: Any) -> None:
    body = project(name())
    body["spec"]["members"] = members
    created = await create(storage, body)
    from_memory = await view.names_with_member(["x"])
    from_database = set(await storage.names_containing("Project", {"spec": {"members": [{"name": "x"}]}}))
    assert (created["metadata"]["name"] in from_memory) == (created["metadata"]["name"] in from_database)
