"""Leader election on a real Lease: one leader at a time, takeover when the leader cannot renew,
and an immediate handover when the leader shuts down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from nodus.client import Client, NotFound
from nodus.client.leaderelection import LeaderElector
from tests.support.proxy import Proxy
from tests.support.waiting import eventually


class Leadership:
    """Records who leads; fails the test if two ever lead at once."""

    def __init__(self) -> None:
        self.current: set[str] = set()
        self.history: list[str] = []
        self.overlap = False
        self.stopped: list[str] = []

    def lead(self, name: str) -> Callable[[], Awaitable[None]]:
        async def lead() -> None:
            if self.current:
                self.overlap = True
            self.current.add(name)
            self.history.append(name)
            try:
                await asyncio.Event().wait()
            finally:
                self.current.discard(name)
                self.stopped.append(name)

        return lead


@contextlib.asynccontextmanager
async def running(elector: LeaderElector, lead: Callable[[], Awaitable[None]]) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run(lead))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def lease_name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def _elector(client: Client, lease: str, identity: str, duration: float = 3.0) -> LeaderElector:
    return LeaderElector(client, lease, identity, lease_duration=duration, renew_deadline=2.0, retry_period=0.2)


async def test_only_one_of_two_leads(client: Client, lease_name: str) -> None:
    leadership = Leadership()
    a, b = _elector(client, lease_name, "a"), _elector(client, lease_name, "b")
    async with running(a, leadership.lead("a")), running(b, leadership.lead("b")):
        await eventually(lambda: leadership.current != set())
        await asyncio.sleep(1.0)  # several retry periods in which the standby must not lead
        assert len(leadership.history) == 1 and not leadership.overlap
        leader, standby = (a, b) if leadership.history == ["a"] else (b, a)
        assert leader.is_leader and not standby.is_leader
        lease = await client.get("leases", lease_name)
        assert lease["spec"]["holderIdentity"] == leader.identity
        assert lease["spec"]["leaseDurationSeconds"] == 3
        assert lease["spec"]["renewTime"].endswith("Z")


async def test_a_leader_that_cannot_renew_stops_before_the_other_takes_over(
    client: Client, proxied: Client, proxy: Proxy, lease_name: str
) -> None:
    leadership = Leadership()
    cut_off = _elector(proxied, lease_name, "cut-off")
    async with running(cut_off, leadership.lead("cut-off")):
        await eventually(lambda: cut_off.is_leader)
        other = _elector(client, lease_name, "other")
        async with running(other, leadership.lead("other")):
            await asyncio.sleep(0.5)
            assert not other.is_leader
            proxy.paused = True  # the leader loses the server: it can no longer renew
            proxy.cut()
            await eventually(lambda: other.is_leader, timeout=30)
            # Leading starts right after is_leader flips (its own task): wait for it, not for the flag alone.
            await eventually(lambda: leadership.history == ["cut-off", "other"], timeout=10)
            assert leadership.stopped[0] == "cut-off" and not leadership.overlap
            assert not cut_off.is_leader

            proxy.paused = False  # back on the network, it stands by
            await asyncio.sleep(1.0)
            assert not cut_off.is_leader and leadership.current == {"other"}
    lease = await client.get("leases", lease_name)
    assert lease["spec"]["leaseTransitions"] >= 1


async def test_stopping_the_leaders_task_without_release_lets_the_standby_take_over(
    client: Client, proxied: Client, proxy: Proxy, lease_name: str
) -> None:
    leadership = Leadership()
    crashed = _elector(proxied, lease_name, "crashed")
    async with running(crashed, leadership.lead("crashed")) as task:
        await eventually(lambda: crashed.is_leader)
        other = _elector(client, lease_name, "other")
        async with running(other, leadership.lead("other")):
            await asyncio.sleep(0.5)
            proxy.paused = True  # so that stopping cannot release the lease: like a crash
            proxy.cut()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert leadership.current == set()
            await eventually(lambda: other.is_leader, timeout=30)
            await eventually(lambda: leadership.history == ["crashed", "other"], timeout=10)
            assert not leadership.overlap


async def test_a_clean_shutdown_hands_over_at_once(client: Client, lease_name: str) -> None:
    leadership = Leadership()
    # A lease far longer than the waits below: only a release lets the standby in within them.
    first = _elector(client, lease_name, "first", duration=120.0)
    second = _elector(client, lease_name, "second", duration=120.0)
    first_task = asyncio.create_task(first.run(leadership.lead("first")))
    await eventually(lambda: first.is_leader)
    async with running(second, leadership.lead("second")):
        await asyncio.sleep(0.5)
        assert not second.is_leader
        first_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first_task
        assert not first.is_leader and leadership.current == set()
        await eventually(lambda: second.is_leader, timeout=20)
        assert leadership.history == ["first", "second"] and not leadership.overlap
    released = await client.get("leases", lease_name)
    assert released["spec"]["holderIdentity"] == ""


async def test_lead_returning_releases_and_ends_run(client: Client, lease_name: str) -> None:
    ran: list[bool] = []

    async def lead() -> None:
        ran.append(True)

    elector = _elector(client, lease_name, "once")
    await asyncio.wait_for(elector.run(lead), 30)
    assert ran == [True] and not elector.is_leader
    assert (await client.get("leases", lease_name))["spec"]["holderIdentity"] == ""


async def test_lead_raising_releases_and_propagates(client: Client, lease_name: str) -> None:
    async def lead() -> None:
        raise RuntimeError("boom")

    elector = _elector(client, lease_name, "fails")
    with pytest.raises(RuntimeError, match="boom"):
        await asyncio.wait_for(elector.run(lead), 30)
    assert (await client.get("leases", lease_name))["spec"]["holderIdentity"] == ""


async def test_the_lease_is_created_on_first_use(client: Client, lease_name: str) -> None:
    with pytest.raises(NotFound):
        await client.get("leases", lease_name)
    elector = _elector(client, lease_name, "creator")
    async with running(elector, Leadership().lead("creator")):
        await eventually(lambda: elector.is_leader)
    lease = await client.get("leases", lease_name)
    assert lease["spec"]["leaseTransitions"] == 0 and lease["spec"]["acquireTime"]
