"""The REST client against the real API server: CRUD, errors, lists, watches and raw streams."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nodus.client import (
    AlreadyExists,
    Client,
    ClientConfig,
    Conflict,
    Forbidden,
    NotFound,
    Unauthorized,
    WatchEvent,
)
from nodus.client import rest as rest_client
from tests.support import cluster as clusters
from tests.support.objects import job


async def test_create_get_update_patch_delete(client: Client, project: str) -> None:
    created = await client.create("jobs", job("train"), project)
    assert created["metadata"]["namespace"] == project and created["metadata"]["uid"]

    read = await client.get("jobs", "train", project)
    assert read["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    read["metadata"]["labels"] = {"team": "vision"}
    updated = await client.update("jobs", read, project)
    assert updated["metadata"]["labels"] == {"team": "vision"}

    patched = await client.patch("jobs", "train", {"metadata": {"annotations": {"note": "hi"}}}, project)
    assert patched["metadata"]["annotations"] == {"note": "hi"}
    assert patched["metadata"]["labels"] == {"team": "vision"}

    deleted = await client.delete("jobs", "train", project)
    assert deleted is not None and deleted["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(NotFound) as missing:
        await client.get("jobs", "train", project)
    assert missing.value.status == 404 and missing.value.reason == "NotFound"
    assert missing.value.body["kind"] == "Status"
    with pytest.raises(NotFound):
        await client.delete("jobs", "train", project)


async def test_cluster_scoped_get(client: Client, project: str) -> None:
    got = await client.get("projects", project)
    assert got["kind"] == "Project" and got["metadata"]["name"] == project


async def test_create_twice_is_already_exists(client: Client, project: str) -> None:
    await client.create("jobs", job("once"), project)
    with pytest.raises(AlreadyExists) as error:
        await client.create("jobs", job("once"), project)
    assert error.value.status == 409 and error.value.reason == "AlreadyExists"


async def test_stale_update_and_stale_patch_are_conflicts(client: Client, project: str) -> None:
    stale = await client.create("jobs", job("racy"), project)
    await client.patch("jobs", "racy", {"metadata": {"labels": {"winner": "first"}}}, project)

    stale["metadata"]["labels"] = {"winner": "second"}
    with pytest.raises(Conflict) as error:
        await client.update("jobs", stale, project)
    assert error.value.status == 409 and error.value.reason == "Conflict"

    precondition = {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"], "labels": {"x": "y"}}}
    with pytest.raises(Conflict):
        await client.patch("jobs", "racy", precondition, project)
    assert (await client.get("jobs", "racy", project))["metadata"]["labels"] == {"winner": "first"}


async def test_delete_with_a_uid_precondition_spares_a_recreated_object(client: Client, project: str) -> None:
    first = await client.create("jobs", job("phoenix"), project)
    await client.delete("jobs", "phoenix", project)
    await client.create("jobs", job("phoenix"), project)
    with pytest.raises(Conflict):
        await client.delete("jobs", "phoenix", project, uid=first["metadata"]["uid"], propagation_policy="Background")
    assert (await client.get("jobs", "phoenix", project))["metadata"]["uid"] != first["metadata"]["uid"]


async def test_status_subresource(client: Client, project: str) -> None:
    created = await client.create("jobs", job("observed"), project)
    patched = await client.patch(
        "jobs", "observed", {"status": {"observedGeneration": 1}}, project, subresource="status"
    )
    assert patched["status"]["observedGeneration"] == 1
    ignored = await client.patch("jobs", "observed", {"status": {"observedGeneration": 7}}, project)
    assert ignored["status"]["observedGeneration"] == 1
    assert ignored["metadata"]["uid"] == created["metadata"]["uid"]


async def test_list_follows_continue_and_filters(client: Client, project: str) -> None:
    for i in range(7):
        await client.create("jobs", job(f"j{i}", labels={"parity": "even" if i % 2 == 0 else "odd"}), project)
    listed = await client.list("jobs", project, limit=2)
    assert sorted(j["metadata"]["name"] for j in listed["items"]) == [f"j{i}" for i in range(7)]
    assert listed["metadata"]["resourceVersion"] and "continue" not in listed["metadata"]

    odd = await client.list("jobs", project, label_selector="parity=odd", limit=1)
    assert sorted(j["metadata"]["name"] for j in odd["items"]) == ["j1", "j3", "j5"]
    named = await client.list("jobs", project, field_selector="metadata.name=j4")
    assert [j["metadata"]["name"] for j in named["items"]] == ["j4"]


async def test_errors_carry_the_status(cluster: clusters.Cluster, project: str) -> None:
    async with Client(ClientConfig.from_kubeconfig(cluster.kubeconfig("dave"))) as dave:
        with pytest.raises(Forbidden) as forbidden:
            await dave.list("jobs", project)
    assert forbidden.value.status == 403 and forbidden.value.message
    config = ClientConfig(server=cluster.url, token="wrong", ca_file=str(cluster.ca_file))
    async with Client(config) as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get("projects", project)


async def test_watch_from_a_resource_version(client: Client, project: str) -> None:
    start = (await client.list("jobs", project))["metadata"]["resourceVersion"]
    seen: list[WatchEvent] = []

    async def watch() -> None:
        async with contextlib.aclosing(client.watch("jobs", project, resource_version=start)) as events:
            async for event in events:
                if event.type != "BOOKMARK":
                    seen.append(event)
                if len(seen) == 3:
                    return

    watcher = asyncio.create_task(watch())
    await client.create("jobs", job("w"), project)
    await client.patch("jobs", "w", {"metadata": {"labels": {"changed": "yes"}}}, project)
    await client.delete("jobs", "w", project)
    await asyncio.wait_for(watcher, 30)
    assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    versions = [int(e.resource_version) for e in seen]
    assert versions == sorted(versions) and versions[0] > int(start)


async def test_watch_without_a_version_starts_with_the_current_objects_and_bookmarks(
    client: Client, project: str
) -> None:
    await client.create("jobs", job("existing"), project)
    types: list[str] = []
    async with contextlib.aclosing(client.watch("jobs", project, timeout_seconds=5)) as events:
        async for event in events:
            types.append(event.type)
            if event.type == "BOOKMARK":
                assert event.resource_version
                break
    assert types[0] == "ADDED" and types[-1] == "BOOKMARK"


async def test_a_watch_ends_at_its_timeout(client: Client, project: str) -> None:
    start = (await client.list("jobs", project))["metadata"]["resourceVersion"]
    events = [e async for e in client.watch("jobs", project, resource_version=start, timeout_seconds=1)]
    assert all(e.type == "BOOKMARK" for e in events)


async def test_raw_request_and_stream_lines(client: Client, project: str) -> None:
    response = await client.request("GET", "/version")
    assert response.status_code == 200 and "gitVersion" in response.json()
    with pytest.raises(NotFound):
        await client.request("GET", rest_client.path("jobs", project, "nothing"))
    await client.create("jobs", job("lined"), project)
    path = rest_client.path("jobs", project)
    lines = [line async for line in client.stream_lines(path, {"watch": "true", "timeoutSeconds": "1"})]
    assert any('"lined"' in line for line in lines)
    assert all(line for line in lines)


async def test_requests_share_a_small_pool_and_never_wait_behind_watches(client: Client, project: str) -> None:
    """Streams have a pool of their own; requests queue in the client (at most REQUEST_CONNECTIONS in flight)
    rather than inside httpcore, whose pool scans every connection on each request: each request connection is a
    pool of one."""
    await client.create("jobs", job("pooled"), project)
    streams = [client.watch("jobs", project, timeout_seconds=30) for _ in range(rest_client.REQUEST_CONNECTIONS + 4)]
    try:
        # More watches than there are request connections, each holding its own: every one has its first event.
        firsts = await asyncio.wait_for(asyncio.gather(*(anext(stream) for stream in streams)), 30)
        assert {event.object["metadata"]["name"] for event in firsts} == {"pooled"}
        reads = await asyncio.wait_for(
            asyncio.gather(
                *(client.get("jobs", "pooled", project) for _ in range(3 * rest_client.REQUEST_CONNECTIONS))
            ),
            30,
        )
        assert {r["metadata"]["name"] for r in reads} == {"pooled"}
        # Each request connection is a pool of one; no more of them were made than requests may be in flight.
        assert 1 <= len(client._connections) <= rest_client.REQUEST_CONNECTIONS
        assert all(len(http._transport._pool.connections) <= 1 for http in client._connections)  # type: ignore[attr-defined]
    finally:
        for stream in streams:
            await stream.aclose()


async def test_a_closed_client_sends_nothing_and_closes_every_connection(admin_config: ClientConfig) -> None:
    closing = Client(admin_config)
    await asyncio.gather(*(closing.list("projects") for _ in range(4)))  # several request connections
    connections = list(closing._connections)
    await closing.aclose()
    assert connections and all(http.is_closed for http in connections) and closing._streams.is_closed
    with pytest.raises(RuntimeError, match="closed"):
        await closing.list("projects")
