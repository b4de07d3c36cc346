"""The work queue: de-duplication, one key at a time, delays, backoff and shutdown."""

from __future__ import annotations

import asyncio

import pytest

from nodus.client.workqueue import ShutDown, WorkQueue


async def _drain(queue: WorkQueue[str]) -> list[str]:
    out = []
    while len(queue):
        key = await queue.get()
        out.append(key)
        queue.done(key)
    return out


async def test_keys_are_deduplicated_and_handed_out_in_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "c", "b", "a"):
        queue.add(key)
    assert len(queue) == 3
    assert await _drain(queue) == ["a", "b", "c"]


async def test_a_key_in_process_is_not_handed_out_again_until_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # changed while being processed: dirty
    queue.add("a")
    assert len(queue) == 0
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0.05)
    assert not second.done()  # no second worker gets "a" while the first has it
    queue.done(key)
    assert await asyncio.wait_for(second, 5) == "a"  # re-run once after done
    queue.done("a")
    assert len(queue) == 0


async def test_done_without_a_re_add_does_not_requeue() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.done(await queue.get())
    assert len(queue) == 0


async def test_waiting_workers_each_get_a_different_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    workers = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    for key in ("x", "y", "x", "z"):
        queue.add(key)
    got = await asyncio.wait_for(asyncio.gather(*workers), 5)
    assert sorted(got) == ["x", "y", "z"]


async def test_a_cancelled_getter_does_not_swallow_a_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("a")  # wakes the first getter ...
    first.cancel()  # ... which is cancelled before it runs
    assert await asyncio.wait_for(second, 5) == "a"


async def test_add_after_orders_by_time_and_keeps_the_earliest() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 0.3)
    queue.add_after("early", 0.1)
    queue.add_after("late", 0.05)  # an earlier time wins
    queue.add_after("early", 5)  # a later time does not postpone
    assert len(queue) == 0
    got = [await asyncio.wait_for(queue.get(), 5) for _ in range(2)]
    assert got == ["late", "early"]


async def test_add_after_zero_adds_now() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("now", 0)
    assert len(queue) == 1


@pytest.mark.parametrize(
    ("base", "cap", "expected"),
    [
        pytest.param(0.005, 60.0, [0.005, 0.01, 0.02, 0.04, 0.08], id="default-doubling"),
        pytest.param(1.0, 5.0, [1.0, 2.0, 4.0, 5.0, 5.0], id="capped"),
    ],
)
def test_rate_limit_backoff_grows_per_key_until_forgotten(base: float, cap: float, expected: list[float]) -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=base, max_delay=cap)
    assert [queue.when("a") for _ in expected] == expected
    assert queue.num_requeues("a") == len(expected)
    assert queue.when("b") == base  # per key
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    assert queue.when("a") == base


def test_backoff_reaches_the_cap_after_many_failures() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(2000):
        delay = queue.when("a")
    assert delay == 60.0


async def test_add_rate_limited_requeues_after_the_backoff() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01)
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")
    assert len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 5) == "a"
    assert queue.num_requeues("a") == 2


async def test_shutdown_wakes_getters_and_ignores_adds() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiting = asyncio.create_task(queue.get())
    queue.add_after("later", 0.05)
    await asyncio.sleep(0)
    queue.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(waiting, 5)
    queue.add("a")
    queue.add_rate_limited("b")
    assert len(queue) == 0 and queue.shutting_down
    with pytest.raises(ShutDown):
        await queue.get()
    await asyncio.sleep(0.1)
    assert len(queue) == 0  # the delayed add was cancelled


class _Heard:
    def __init__(self) -> None:
        self.adds = 0
        self.retries = 0
        self.waits: list[float] = []

    def added(self) -> None:
        self.adds += 1

    def retried(self) -> None:
        self.retries += 1

    def taken(self, waited: float) -> None:
        self.waits.append(waited)


async def test_an_observer_hears_adds_retries_and_how_long_each_key_waited_ready() -> None:
    heard = _Heard()
    queue: WorkQueue[str] = WorkQueue(base_delay=0.2, observer=heard)
    queue.add("a")
    queue.add("a")  # de-duplicated, but an add all the same
    await asyncio.sleep(0.2)
    assert await queue.get() == "a"
    assert heard.adds == 2 and len(heard.waits) == 1 and heard.waits[0] >= 0.19  # ready since the first add
    queue.add("a")  # while processing: queued again when done, and its wait starts then
    await asyncio.sleep(0.2)
    queue.done("a")
    assert await queue.get() == "a"
    assert len(heard.waits) == 2 and heard.waits[1] < 0.15
    queue.done("a")
    queue.add_rate_limited("b")  # the backoff is not a wait in the queue: only the ready time counts
    assert await asyncio.wait_for(queue.get(), 5) == "b"
    assert heard.retries == 1 and heard.adds == 4 and len(heard.waits) == 3 and heard.waits[2] < 0.15
