"""Watch behaviours from Kubernetes' API conformance tests, over HTTP against a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.objects import job, jobs_path
from tests.support.watching import collect, events, summary

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


async def _create(
    client: httpx.AsyncClient, project: str, name: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    response = await client.post(jobs_path(project), json=job(name, labels=labels))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def _label(client: httpx.AsyncClient, project: str, name: str, labels: dict[str, str | None]) -> dict[str, Any]:
    response = await client.patch(jobs_path(project, name), json={"metadata": {"labels": labels}}, headers=MERGE)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_watch_by_label_selector(admin_async: httpx.AsyncClient, project: str) -> None:
    start = (await admin_async.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
    watching = asyncio.create_task(
        collect(admin_async, jobs_path(project), 3, labelSelector="watch=a", resourceVersion=start)
    )
    await _create(admin_async, project, "a1", {"watch": "a"})
    await _create(admin_async, project, "b1", {"watch": "b"})
    await _label(admin_async, project, "a1", {"extra": "1"})
    await admin_async.delete(jobs_path(project, "b1"))
    await admin_async.delete(jobs_path(project, "a1"))
    seen = await asyncio.wait_for(watching, 20)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [
        ("ADDED", "a1"),
        ("MODIFIED", "a1"),
        ("DELETED", "a1"),
    ]


async def test_watch_from_resource_version_and_rewatch_after_stop(admin_async: httpx.AsyncClient, project: str) -> None:
    created = await _create(admin_async, project, "rv")
    first = await _label(admin_async, project, "rv", {"step": "1"})
    second = await _label(admin_async, project, "rv", {"step": "2"})
    seen = await collect(admin_async, jobs_path(project), 2, resourceVersion=created["metadata"]["resourceVersion"])
    assert [summary(e) for e in seen] == [
        ("MODIFIED", "rv", first["metadata"]["resourceVersion"]),
        ("MODIFIED", "rv", second["metadata"]["resourceVersion"]),
    ]
    # The watch stopped at the second change; what happens next is seen by a watch from there.
    stopped_at = seen[-1]["object"]["metadata"]["resourceVersion"]
    third = await _label(admin_async, project, "rv", {"step": "3"})
    await admin_async.delete(jobs_path(project, "rv"))
    resumed = await collect(admin_async, jobs_path(project), 2, resourceVersion=stopped_at)
    assert [summary(e)[:2] for e in resumed] == [("MODIFIED", "rv"), ("DELETED", "rv")]
    assert resumed[0]["object"]["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"]


async def test_objects_leaving_and_entering_a_selector(admin_async: httpx.AsyncClient, project: str) -> None:
    await _create(admin_async, project, "mover", {"tier": "gpu"})
    start = (await admin_async.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
    watching = asyncio.create_task(
        collect(admin_async, jobs_path(project), 3, labelSelector="tier=gpu", resourceVersion=start)
    )
    await _label(admin_async, project, "mover", {"tier": "cpu"})  # leaves
    await _label(admin_async, project, "mover", {"note": "x"})  # outside: nothing
    await _label(admin_async, project, "mover", {"tier": "gpu"})  # enters
    await _label(admin_async, project, "mover", {"note": "y"})  # inside: modified
    seen = await asyncio.wait_for(watching, 20)
    assert [e["type"] for e in seen] == ["DELETED", "ADDED", "MODIFIED"]
    assert seen[0]["object"]["metadata"]["labels"]["tier"] == "cpu"  # the object as it left


async def test_initial_events_end_with_a_bookmark(admin_async: httpx.AsyncClient, project: str) -> None:
    await _create(admin_async, project, "init-a")
    await _create(admin_async, project, "init-b")
    out: list[dict[str, Any]] = []
    async for event in events(
        admin_async,
        jobs_path(project),
        sendInitialEvents=True,
        allowWatchBookmarks=True,
        resourceVersionMatch="NotOlderThan",
        resourceVersion="0",
    ):
        out.append(event)
        if event["type"] == "BOOKMARK":
            break
    assert [e["type"] for e in out] == ["ADDED", "ADDED", "BOOKMARK"]
    assert out[-1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_without_version_starts_with_current_state(admin_async: httpx.AsyncClient, project: str) -> None:
    await _create(admin_async, project, "present")
    seen = await collect(admin_async, jobs_path(project), 1)
    assert summary(seen[0])[:2] == ("ADDED", "present")


async def test_timeout_seconds_ends_the_watch(admin_async: httpx.AsyncClient, project: str) -> None:
    start = (await admin_async.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
    began = asyncio.get_running_loop().time()
    received = [e async for e in events(admin_async, jobs_path(project), resourceVersion=start, timeoutSeconds=1)]
    assert received == []
    assert asyncio.get_running_loop().time() - began < 10


async def test_concurrent_watchers_from_successive_versions_agree(
    admin_async: httpx.AsyncClient, project: str, cluster: Cluster
) -> None:
    """100 watchers started at successive resourceVersions during constant writes see the same order."""
    names = [f"c{i}" for i in range(5)]
    for name in names:
        await _create(admin_async, project, name)
    stop = asyncio.Event()
    versions: list[str] = []

    async def write() -> None:
        step = 0
        while not stop.is_set():
            obj = await _label(admin_async, project, names[step % len(names)], {"step": str(step)})
            versions.append(obj["metadata"]["resourceVersion"])
            step += 1

    writer = asyncio.create_task(write())
    while len(versions) < 100:
        await asyncio.sleep(0.02)
    starts = versions[:100]
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=str(admin_async.base_url), headers=admin_async.headers, verify=cluster.tls(), limits=limits
    ) as many:
        await asyncio.sleep(0.5)
        final_count = len(versions)
        stop.set()
        await writer
        last = versions[-1]

        async def watch_from(rv: str) -> list[str]:
            seen: list[str] = []
            async for event in events(many, jobs_path(project), resourceVersion=rv, labelSelector="step"):
                if event["type"] == "BOOKMARK":
                    continue
                seen.append(event["object"]["metadata"]["resourceVersion"])
                if seen[-1] == last:
                    return seen
            return seen

        results = await asyncio.wait_for(asyncio.gather(*(watch_from(rv) for rv in starts)), 120)
    assert final_count > 100
    reference = results[0]
    for start, seen in zip(starts, results, strict=True):
        assert seen == [v for v in reference if int(v) > int(start)], f"watcher from {start} disagrees"
        assert seen == [v for v in versions if int(v) > int(start)]


async def test_bookmarks_carry_the_latest_version(admin_async: httpx.AsyncClient, project: str) -> None:
    """An idle watch that allows bookmarks gets them (every second on the test server), at versions that
    only move forward and cover writes to other projects it does not see."""
    start = (await admin_async.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
    other = f"{project}-other"
    bookmarks: list[int] = []
    async for event in events(
        admin_async, jobs_path(project), resourceVersion=start, allowWatchBookmarks=True, timeoutSeconds=4
    ):
        assert event["type"] == "BOOKMARK"
        assert event["object"]["kind"] == "Job" and set(event["object"]["metadata"]) == {"resourceVersion"}
        bookmarks.append(int(event["object"]["metadata"]["resourceVersion"]))
        if len(bookmarks) == 1:
            await admin_async.post(
                "/apis/nodus.dev/v1/projects",
                json={"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": other}, "spec": {}},
            )
    assert len(bookmarks) >= 2
    assert bookmarks == sorted(bookmarks) and bookmarks[-1] > int(start)
    await admin_async.delete(f"/apis/nodus.dev/v1/projects/{other}")


async def test_list_resource_version_semantics(admin_async: httpx.AsyncClient, project: str) -> None:
    first = await _create(admin_async, project, "v1")
    rv = first["metadata"]["resourceVersion"]
    await _create(admin_async, project, "v2")
    exact = (
        await admin_async.get(jobs_path(project), params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    ).json()
    assert [i["metadata"]["name"] for i in exact["items"]] == ["v1"] and exact["metadata"]["resourceVersion"] == rv
    newer = (
        await admin_async.get(
            jobs_path(project), params={"resourceVersion": rv, "resourceVersionMatch": "NotOlderThan"}
        )
    ).json()
    assert [i["metadata"]["name"] for i in newer["items"]] == ["v1", "v2"]
    future = await admin_async.get(jobs_path(project), params={"resourceVersion": str(int(rv) + 10**9)})
    assert future.status_code == 504 and future.json()["reason"] == "Timeout"
    both = await admin_async.get(jobs_path(project), params={"resourceVersionMatch": "Exact"})
    assert both.status_code == 400


async def test_deletecollection_with_a_selector(admin_async: httpx.AsyncClient, project: str) -> None:
    for name, team in (("d1", "a"), ("d2", "a"), ("d3", "b")):
        await _create(admin_async, project, name, {"team": team})
    response = await admin_async.delete(jobs_path(project), params={"labelSelector": "team=a"})
    assert response.status_code == 200
    assert sorted(i["metadata"]["name"] for i in response.json()["items"]) == ["d1", "d2"]
    left = (await admin_async.get(jobs_path(project))).json()["items"]
    assert [i["metadata"]["name"] for i in left] == ["d3"]


def _watch_events_sent(cluster: Cluster) -> float:
    with cluster.client("prometheus") as prometheus:
        text = prometheus.get("/metrics").text
    for line in text.splitlines():
        if line.startswith('nodus_apiserver_watch_events_sent_total{resource="jobs"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_events_sent_are_counted_while_catching_up_and_when_fed_live(
    cluster: Cluster, admin_async: httpx.AsyncClient, project: str
) -> None:
    before = _watch_events_sent(cluster)
    start = (await admin_async.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
    await _create(admin_async, project, "early-1")
    await _create(admin_async, project, "early-2")  # read from the cache by the watch catching up
    watching = asyncio.create_task(collect(admin_async, jobs_path(project), 4, resourceVersion=start))
    await asyncio.sleep(0.5)  # caught up: the next events are fed to it by the cache's fan-out
    await _create(admin_async, project, "live-1")
    await _create(admin_async, project, "live-2")
    seen = await asyncio.wait_for(watching, 20)
    assert [e["object"]["metadata"]["name"] for e in seen] == ["early-1", "early-2", "live-1", "live-2"]
    assert _watch_events_sent(cluster) - before >= 4


async def test_live_watches_by_name_and_by_label_get_exactly_their_events(
    admin_async: httpx.AsyncClient, project: str
) -> None:
    """The cache offers an event only to the watchers indexed under its name or labels (or unindexed); a watcher
    of one label value still sees an object leave (DELETED) and come back (ADDED)."""
    start = (await admin_async.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
    by_name = asyncio.create_task(
        collect(admin_async, jobs_path(project), 3, fieldSelector="metadata.name=one", resourceVersion=start)
    )
    by_label = asyncio.create_task(
        collect(admin_async, jobs_path(project), 5, labelSelector="node=a", resourceVersion=start)
    )
    everything = asyncio.create_task(collect(admin_async, jobs_path(project), 5, resourceVersion=start))
    await asyncio.sleep(0.5)  # caught up: what follows is fed by the cache's fan-out
    await _create(admin_async, project, "one", {"node": "a"})
    await _create(admin_async, project, "two", {"node": "a"})
    await _label(admin_async, project, "one", {"node": "b"})  # leaves node=a
    await _label(admin_async, project, "one", {"node": "a"})  # comes back
    await _label(admin_async, project, "two", {"other": "x"})  # stays in node=a
    named, labelled, all_ = await asyncio.wait_for(asyncio.gather(by_name, by_label, everything), 20)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in named] == [
        ("ADDED", "one"),
        ("MODIFIED", "one"),
        ("MODIFIED", "one"),
    ]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in labelled] == [
        ("ADDED", "one"),
        ("ADDED", "two"),
        ("DELETED", "one"),
        ("ADDED", "one"),
        ("MODIFIED", "two"),
    ]
    assert len(all_) == 5
