"""A gang's assembly through the real API server and real sockets: every rank registers, probes its
peers and agrees on the rendezvous; an ended member or an unreachable peer fails it, and says so."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from nodus.agent.meshing import Assembled, Mesh, MeshFailed
from nodus.apis.v1 import objects
from nodus.client import Client
from tests.conftest import make_project

pytestmark = pytest.mark.e2e

Object = dict[str, Any]
PROBE_BYTES = 4 << 20
# Only a guard against a hung test; the assembly itself has no timeout of its own.
BOUND = 60


@pytest.fixture
def namespace(admin: httpx.Client) -> str:
    return make_project(admin, prefix="mesh")


async def make_gang(api: Client, namespace: str, size: int, job: str = "train", epoch: int = 1) -> list[Object]:
    """One rank Attempt per rank of epoch ``epoch`` of a (nonexistent) Job, as the Job controller writes them."""
    uid = str(uuid.uuid4())
    members = [f"{job}-0-{epoch}-r{rank}" for rank in range(size)]
    gang = {"size": size, "epoch": epoch, "gpusPerNode": 0, "members": members, "startupTimeout": "5m"}
    attempts = []
    for rank, name in enumerate(members):
        body = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Attempt",
            "metadata": {"name": name, "labels": {"nodus.dev/job": job, "nodus.dev/gang-epoch": str(epoch)}},
            "spec": {"job": job, "jobUID": uid, "index": 0, "number": epoch, "rank": rank, "gang": gang},
        }
        attempts.append(await api.create("attempts", body, namespace))
    return attempts


async def gang_status(api: Client, namespace: str, name: str) -> Object:
    attempt = await api.get("attempts", name, namespace)
    return dict((attempt.get("status") or {}).get("gang") or {})


async def registered(api: Client, namespace: str, name: str) -> str:
    """The rank's mesh address, once it has registered."""
    async with asyncio.timeout(BOUND):
        while not (address := (await gang_status(api, namespace, name)).get("address")):
            await asyncio.sleep(0.05)
    return str(address)


def start(mesh: Mesh) -> asyncio.Task[Assembled]:
    return asyncio.create_task(mesh.assemble())


async def test_a_gang_assembles_once_every_rank_has_registered_and_probed(api: Client, namespace: str) -> None:
    attempts = await make_gang(api, namespace, 3)
    meshes = [Mesh(api, objects.read(objects.Attempt, attempt), probe_bytes=PROBE_BYTES) for attempt in attempts]
    names = [attempt["metadata"]["name"] for attempt in attempts]
    try:
        early = [start(meshes[0]), start(meshes[1])]
        for name in names[:2]:
            await registered(api, namespace, name)
        assert not any(task.done() for task in early)  # rank 2 has not registered: nobody moves on

        async with asyncio.timeout(BOUND):
            assembled = await asyncio.gather(*early, start(meshes[2]))
    finally:
        for mesh in meshes:
            await mesh.close()

    statuses = [await gang_status(api, namespace, name) for name in names]
    for status in statuses:
        assert status.keys() >= {"address", "registeredTime", "probe", "probedTime"}
        assert status["probe"].keys() == {"rttMs", "busGbps", "measuredTime"}
        assert "failure" not in status
    assert "rendezvous" in statuses[0]
    assert not any("rendezvous" in status for status in statuses[1:])

    first = assembled[0]
    assert f"{first.rendezvous_host}:{first.rendezvous_port}" == statuses[0]["rendezvous"]
    assert first.hosts == ("127.0.0.1",) * 3
    for result in assembled:
        assert (result.rendezvous_host, result.rendezvous_port, result.hosts) == (
            first.rendezvous_host,
            first.rendezvous_port,
            first.hosts,
        )
        assert result.rtt_ms > 0
        assert result.bus_gbps > 0


async def test_a_member_that_ended_fails_the_others_naming_it(api: Client, namespace: str) -> None:
    attempts = await make_gang(api, namespace, 3)
    ended = attempts[2]["metadata"]["name"]
    await api.patch("attempts", ended, {"status": {"phase": "Stopped"}}, namespace, subresource="status")
    meshes = [Mesh(api, objects.read(objects.Attempt, attempt), probe_bytes=PROBE_BYTES) for attempt in attempts[:2]]
    try:
        async with asyncio.timeout(BOUND):
            results = await asyncio.gather(*(start(mesh) for mesh in meshes), return_exceptions=True)
    finally:
        for mesh in meshes:
            await mesh.close()

    for attempt, result in zip(attempts[:2], results, strict=True):
        assert isinstance(result, MeshFailed), result
        assert ended in str(result) and "Stopped" in str(result)
        failure = (await gang_status(api, namespace, attempt["metadata"]["name"])).get("failure")
        assert failure == str(result)


async def test_a_cancelled_assembly_stops_listening(api: Client, namespace: str) -> None:
    attempts = await make_gang(api, namespace, 2)
    mesh = Mesh(api, objects.read(objects.Attempt, attempts[0]), probe_bytes=PROBE_BYTES)
    task = start(mesh)
    address = await registered(api, namespace, attempts[0]["metadata"]["name"])
    host, port = address.rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))  # listening while it waits for its peer
    writer.close()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(host, int(port))
    await mesh.close()  # and closing again is harmless


async def test_an_unreachable_peer_fails_the_prober_which_reports_it(api: Client, namespace: str) -> None:
    attempts = await make_gang(api, namespace, 2)
    names = [attempt["metadata"]["name"] for attempt in attempts]
    gone = Mesh(api, objects.read(objects.Attempt, attempts[1]), probe_bytes=PROBE_BYTES)
    leaving = start(gone)
    address = await registered(api, namespace, names[1])
    leaving.cancel()  # its endpoint closes, its registration stays
    with pytest.raises(asyncio.CancelledError):
        await leaving

    prober = Mesh(api, objects.read(objects.Attempt, attempts[0]), probe_bytes=PROBE_BYTES)
    try:
        async with asyncio.timeout(BOUND):
            with pytest.raises(MeshFailed) as failed:
                await prober.assemble()
    finally:
        await prober.close()

    assert names[1] in str(failed.value) and address in str(failed.value)
    status = await gang_status(api, namespace, names[0])
    assert status["failure"] == str(failed.value)
    assert "probedTime" not in status
