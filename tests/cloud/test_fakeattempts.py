"""A fake run writes what an agent's run writes: Starting, Running, then the end the agent's decisions give."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from nodus.cloud.fakeattempts import FakeRun


def attempt(duration: str = "50ms", code: str = "0", interruptible: bool = False) -> dict[str, Any]:
    env = [{"name": "FAKEHOST_DURATION", "value": duration}, {"name": "FAKEHOST_EXIT_CODE", "value": code}]
    return {
        "metadata": {"name": "a-0-1", "namespace": "p", "uid": "u1"},
        "spec": {"job": "a", "index": 0, "number": 1, "node": "n1", "env": env},
        "status": {"placement": {"offering": "o", "interruptible": interruptible}},
    }


class Reports:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], bool]] = []

    async def __call__(self, attempt: dict[str, Any], status: dict[str, Any], terminal: bool) -> None:
        self.sent.append((status, terminal))

    def phases(self) -> list[str]:
        return [status["phase"] for status, _ in self.sent]


async def run(fake: FakeRun) -> None:
    fake.start()
    assert fake.task is not None
    await asyncio.wait_for(fake.task, 5)


async def test_a_program_that_exits_0_succeeds_and_one_that_does_not_fails_with_its_code() -> None:
    reports = Reports()
    await run(FakeRun(attempt(), (0, 1), reports, timedelta(seconds=5)))
    assert reports.phases() == ["Starting", "Running", "Succeeded"]
    starting, running, (end, terminal) = reports.sent[0][0], reports.sent[1][0], reports.sent[2]
    assert starting["gpuIndexes"] == [0, 1] and starting["runtime"] == {"sandbox": "fake"}
    assert running["startTime"] and terminal
    assert (end["reason"], end["exitCode"], end["finishTime"] >= running["startTime"]) == ("Completed", 0, True)
    failed = Reports()
    await run(FakeRun(attempt(code="3"), (), failed, timedelta(seconds=5)))
    assert (failed.sent[-1][0]["phase"], failed.sent[-1][0]["reason"], failed.sent[-1][0]["exitCode"]) == (
        "Failed",
        "Error",
        3,
    )


async def test_a_stop_ends_the_program_at_once_and_a_host_going_away_loses_it() -> None:
    stopped = Reports()
    fake = FakeRun(attempt(duration="1h"), (), stopped, timedelta(seconds=5))
    fake.start()
    await asyncio.sleep(0.05)
    fake.request_stop("Cancelled", 30)
    assert fake.task is not None
    await asyncio.wait_for(fake.task, 5)
    assert stopped.sent[-1][0]["phase"] == "Stopped" and stopped.sent[-1][0]["signal"] == 15
    preempted = Reports()
    fake = FakeRun(attempt(duration="1h", interruptible=True), (), preempted, timedelta(seconds=5))
    fake.start()
    await asyncio.sleep(0.05)
    fake.request_stop("HostGone", 3, lost_reason="Preempted")
    assert fake.task is not None
    await asyncio.wait_for(fake.task, 5)
    end = preempted.sent[-1][0]
    assert (end["phase"], end["reason"]) == ("Lost", "Preempted")
    assert "interruptible capacity" in end["message"]


async def test_a_stop_before_the_program_starts_ends_it_early_and_a_killed_host_writes_nothing_more() -> None:
    early = Reports()
    fake = FakeRun(attempt(), (), early, timedelta(seconds=5))
    fake.start()
    fake.request_stop("HostGone", 0, lost_reason="NodeLost")
    await run_to_end(fake)
    assert early.phases() == ["Starting", "Lost"]
    killed = Reports()
    fake = FakeRun(attempt(duration="1h"), (), killed, timedelta(seconds=5))
    fake.start()
    await asyncio.sleep(0.05)
    fake.kill()
    await asyncio.sleep(0.05)
    assert killed.phases() == ["Starting", "Running"]


async def run_to_end(fake: FakeRun) -> None:
    assert fake.task is not None
    await asyncio.wait_for(fake.task, 5)
