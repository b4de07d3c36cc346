"""Informers against the real API server: the cache follows creates, updates and deletes, indexes
answer lookups, and a dropped stream is recovered by listing again (deletions missed included)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from nodus.client import Client
from nodus.client.informers import Informer
from tests.support.objects import job
from tests.support.proxy import Proxy
from tests.support.waiting import eventually


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = []

    def __call__(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        self.changes.append((old, new))

    def deleted(self) -> set[str]:
        return {old["metadata"]["name"] for old, new in self.changes if new is None and old is not None}

    def added(self) -> set[str]:
        return {new["metadata"]["name"] for old, new in self.changes if old is None and new is not None}


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 30)
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _label(informer: Informer, project: str, name: str, key: str) -> str | None:
    obj = informer.get(project, name)
    return None if obj is None else (obj["metadata"].get("labels") or {}).get(key)


async def test_cache_follows_create_update_delete(client: Client, project: str) -> None:
    await client.create("jobs", job("before"), project)
    informer = Informer(client, "jobs", namespace=project)
    recorder = Recorder()
    informer.add_handler(recorder)
    async with running(informer):
        assert informer.get(project, "before") is not None
        assert recorder.added() == {"before"}

        await client.create("jobs", job("new"), project)
        await eventually(lambda: informer.get(project, "new") is not None)

        await client.patch("jobs", "new", {"metadata": {"labels": {"stage": "two"}}}, project)
        await eventually(lambda: _label(informer, project, "new", "stage") == "two")
        modified = [(o, n) for o, n in recorder.changes if o and n and n["metadata"]["name"] == "new"]
        assert modified and (modified[-1][0] or {})["metadata"].get("labels", {}).get("stage") is None

        await client.delete("jobs", "before", project)
        await eventually(lambda: informer.get(project, "before") is None)
        assert recorder.deleted() == {"before"}
        assert sorted(j["metadata"]["name"] for j in informer.items()) == ["new"]
        assert int(informer.resource_version) > 0


async def test_label_selector_and_index(client: Client, project: str) -> None:
    informer = Informer(client, "jobs", namespace=project, label_selector="pool=gpu")
    informer.add_index("team", lambda obj: [obj["metadata"]["labels"].get("team", "")])
    async with running(informer):
        await client.create("jobs", job("a", labels={"pool": "gpu", "team": "vision"}), project)
        await client.create("jobs", job("b", labels={"pool": "gpu", "team": "speech"}), project)
        await client.create("jobs", job("c", labels={"pool": "gpu", "team": "vision"}), project)
        await client.create("jobs", job("cpu", labels={"pool": "cpu", "team": "vision"}), project)
        await eventually(lambda: len(informer.by_index("team", "vision")) == 2)
        assert sorted(j["metadata"]["name"] for j in informer.by_index("team", "vision")) == ["a", "c"]
        assert informer.get(project, "cpu") is None

        # Moving between index values, and leaving the selector (seen as a deletion).
        await client.patch("jobs", "c", {"metadata": {"labels": {"team": "speech"}}}, project)
        await client.patch("jobs", "b", {"metadata": {"labels": {"pool": "cpu"}}}, project)
        await eventually(lambda: informer.get(project, "b") is None)
        await eventually(lambda: [j["metadata"]["name"] for j in informer.by_index("team", "speech")] == ["c"])
        assert [j["metadata"]["name"] for j in informer.by_index("team", "vision")] == ["a"]

    # An index added to a filled cache covers what is already there.
    informer.add_index("name", lambda obj: [obj["metadata"]["name"]])
    assert [j["metadata"]["name"] for j in informer.by_index("name", "a")] == ["a"]


async def test_a_handler_added_late_is_replayed_the_cache(client: Client, project: str) -> None:
    await client.create("jobs", job("early"), project)
    informer = Informer(client, "jobs", namespace=project)
    async with running(informer):
        recorder = Recorder()
        informer.add_handler(recorder)
        assert recorder.added() == {"early"}


async def test_a_failing_handler_does_not_stop_the_informer(client: Client, project: str) -> None:
    informer = Informer(client, "jobs", namespace=project)

    def broken(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        raise RuntimeError("handler bug")

    recorder = Recorder()
    informer.add_handler(broken)
    informer.add_handler(recorder)
    async with running(informer):
        await client.create("jobs", job("x"), project)
        await client.create("jobs", job("y"), project)
        await eventually(lambda: recorder.added() == {"x", "y"})


async def test_resync_re_emits_the_cache(client: Client, project: str) -> None:
    await client.create("jobs", job("steady"), project)
    informer = Informer(client, "jobs", namespace=project, resync=0.1)
    recorder = Recorder()
    informer.add_handler(recorder)
    async with running(informer):
        await eventually(lambda: any(o is not None and o is n for o, n in recorder.changes))


async def test_a_dropped_stream_lists_again_and_sees_what_it_missed(
    client: Client, proxied: Client, proxy: Proxy, project: str
) -> None:
    for name in ("stays", "goes", "changes"):
        await client.create("jobs", job(name), project)
    informer = Informer(proxied, "jobs", namespace=project, initial_backoff=0.05, max_backoff=0.5)
    recorder = Recorder()
    informer.add_handler(recorder)
    async with running(informer):
        assert {j["metadata"]["name"] for j in informer.items()} == {"stays", "goes", "changes"}
        connections = proxy.connections
        proxy.paused = True
        proxy.cut()
        # While the informer cannot reach the server:
        await client.delete("jobs", "goes", project)
        await client.patch("jobs", "changes", {"metadata": {"labels": {"v": "2"}}}, project)
        await client.create("jobs", job("arrives"), project)
        await asyncio.sleep(0.3)  # let it fail to reconnect at least once
        proxy.paused = False
        await eventually(lambda: informer.get(project, "goes") is None)
        await eventually(lambda: _label(informer, project, "changes", "v") == "2")
        await eventually(lambda: informer.get(project, "arrives") is not None)
        assert proxy.connections > connections
        assert "goes" in recorder.deleted() and "arrives" in recorder.added()
        assert informer.get(project, "stays") is not None

        # And it watches again: later changes arrive too.
        await client.create("jobs", job("after"), project)
        await eventually(lambda: informer.get(project, "after") is not None)


async def test_a_watch_the_server_ends_is_resumed(client: Client, project: str) -> None:
    informer = Informer(client, "jobs", namespace=project, watch_timeout=1)
    async with running(informer):
        await asyncio.sleep(2.5)  # at least one watch ended by the server
        await client.create("jobs", job("resumed"), project)
        await eventually(lambda: informer.get(project, "resumed") is not None)
