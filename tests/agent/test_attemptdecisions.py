"""Tables of the attempt's stop, checkpoint and end decisions (nodus.agent.attemptdecisions): each row is an input
state, what arrives (a request, a time, the program's Exit) and the expected decision, including the races between
a user's stop, its withdrawal, a host going away and a deleted Attempt."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from nodus.agent.attemptdecisions import (
    StopRequest,
    StopState,
    Terminal,
    after_failed_checkpoint,
    checkpoint_plan,
    given_up,
    grace,
    notice_kind,
    requested,
    stopped_early,
    terminal,
    withdrawn,
)
from nodus.agent.checkpointing import STOP_TRIES
from nodus.agent.runtime import Exit

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


IDLE = StopState()
# A user's suspend under way: checkpoint first, until a deadline a minute away.
SUSPEND = StopRequest("Suspended", 10, checkpoint=True, deadline=at(60), requested_time="t1")
SUSPENDING = StopState("Suspended", None, True, at(60), "t1", False, None, 10, True)
# A plain user stop (no checkpoint) with its grace.
STOPPING = StopState("Stopped", None, False, None, "t1", False, None, 30, True)
# The suspend given up after STOP_TRIES failed checkpoints: its requestedTime is not tried again.
ABANDONED = StopState(None, None, False, None, "t1", False, "t1", 10, False)
PREEMPTED = StopState("HostGone", "Preempted", True, at(40), None, False, None, 10, True)


def preempt(notice: float) -> StopRequest:
    return StopRequest("HostGone", notice, lost_reason="Preempted")


@pytest.mark.parametrize(
    ("state", "asked", "expected"),
    [
        pytest.param(IDLE, SUSPEND, SUSPENDING, id="a suspend from idle"),
        pytest.param(
            IDLE,
            StopRequest("Stopped", 5),
            StopState("Stopped", None, False, None, None, False, None, 5, True),
            id="a plain stop, no requestedTime, nothing abandoned",
        ),
        pytest.param(
            SUSPENDING, StopRequest("Other", 1, requested_time="t2"), SUSPENDING, id="asked twice: first wins"
        ),
        pytest.param(SUSPENDING, SUSPEND, SUSPENDING, id="the same spec.stop seen again"),
        pytest.param(IDLE, preempt(50), PREEMPTED, id="host going away with notice: checkpoint 80%, grace 20%"),
        pytest.param(
            IDLE,
            StopRequest("HostGone", 50, lost_reason="Preempted", checkpoint=False, deadline=at(5), requested_time="x"),
            replace(PREEMPTED, requested_time="x"),
            id="a host's notice ignores a request's own checkpoint and deadline",
        ),
        pytest.param(
            SUSPENDING,
            preempt(50),
            replace(SUSPENDING, lost_reason="Preempted", deadline=at(40), grace_seconds=10),
            id="host going away during a suspend: the notice's plan, the user's reason",
        ),
        pytest.param(
            STOPPING,
            preempt(1),
            replace(STOPPING, lost_reason="Preempted", grace_seconds=1),
            id="notice of 1 s after a user stop: no checkpoint, grace min",
        ),
        pytest.param(
            replace(STOPPING, grace_seconds=0.5),
            preempt(1),
            replace(STOPPING, lost_reason="Preempted", grace_seconds=0.5),
            id="notice longer than the user's grace keeps the user's",
        ),
        pytest.param(
            SUSPENDING,
            preempt(0),
            replace(SUSPENDING, lost_reason="Preempted", grace_seconds=0),
            id="no notice during a suspend: its checkpoint plan stays, grace 0",
        ),
        pytest.param(
            IDLE,
            StopRequest("HostGone", 0, lost_reason="NodeLost"),
            StopState("HostGone", "NodeLost", False, None, None, False, None, 0, True),
            id="no notice from idle: no checkpoint, no grace beyond the notice",
        ),
        pytest.param(
            IDLE,
            StopRequest("HostGone", 1, lost_reason="NodeLost"),
            StopState("HostGone", "NodeLost", False, None, None, False, None, 1, True),
            id="notice of exactly 1 s: no checkpoint, 1 s of grace",
        ),
        pytest.param(
            ABANDONED,
            StopRequest("AttemptDeleted", 0, lost_reason="AttemptDeleted"),
            StopState("AttemptDeleted", "AttemptDeleted", False, None, None, False, "t1", 0, True),
            id="deleted after a given-up suspend: no grace beyond the notice",
        ),
        pytest.param(PREEMPTED, StopRequest("HostGone", 0, lost_reason="NodeLost"), PREEMPTED, id="host lost twice"),
        pytest.param(
            PREEMPTED,
            StopRequest("AttemptDeleted", 0, lost_reason="AttemptDeleted"),
            PREEMPTED,
            id="deleted while the host goes away: the first lost reason wins",
        ),
        pytest.param(PREEMPTED, SUSPEND, PREEMPTED, id="a user stop after the host's notice changes nothing"),
        pytest.param(ABANDONED, SUSPEND, ABANDONED, id="an abandoned requestedTime coming again is ignored"),
        pytest.param(
            ABANDONED,
            replace(SUSPEND, requested_time="t2"),
            replace(SUSPENDING, requested_time="t2", abandoned_time="t1"),
            id="a new requestedTime after an abandoned one is a new stop",
        ),
        pytest.param(
            replace(ABANDONED, abandoned_time=None),
            replace(SUSPEND, requested_time=None),
            replace(SUSPENDING, requested_time=None),
            id="no requestedTime never matches no abandoned one",
        ),
        pytest.param(
            ABANDONED,
            preempt(50),
            replace(PREEMPTED, abandoned_time="t1"),
            id="the host going away after an abandoned suspend still stops",
        ),
        pytest.param(
            replace(SUSPENDING, withdrawn=True),
            replace(SUSPEND, requested_time="t2"),
            replace(SUSPENDING, withdrawn=True),
            id="re-asked while a withdrawn stop is still set: ignored, still withdrawn",
        ),
        pytest.param(
            replace(IDLE, withdrawn=True, requested_time="t1", grace_seconds=10),
            replace(SUSPEND, requested_time="t2"),
            replace(SUSPENDING, requested_time="t2"),
            id="a new stop after a withdrawn one given up is not withdrawn",
        ),
        pytest.param(
            replace(SUSPENDING, withdrawn=True),
            preempt(50),
            replace(SUSPENDING, withdrawn=False, lost_reason="Preempted", deadline=at(40), grace_seconds=10),
            id="host going away after a withdrawal: a host's stop is not withdrawn",
        ),
        pytest.param(
            IDLE,
            StopRequest("Stopped\nLast log lines:\nforged", 5, requested_time="\x00"),
            StopState("Stopped\nLast log lines:\nforged", None, False, None, "\x00", False, None, 5, True),
            id="a hostile reason and requestedTime are data, never parsed",
        ),
    ],
)
def test_requested(state: StopState, asked: StopRequest, expected: StopState) -> None:
    assert requested(state, asked, NOW) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(IDLE, IDLE, id="nothing to withdraw"),
        pytest.param(SUSPENDING, replace(SUSPENDING, withdrawn=True), id="a suspend taken back"),
        pytest.param(ABANDONED, ABANDONED, id="a given-up stop has no reason left to withdraw"),
        pytest.param(PREEMPTED, PREEMPTED, id="a host going away cannot be taken back"),
        pytest.param(
            replace(SUSPENDING, lost_reason="NodeLost"),
            replace(SUSPENDING, lost_reason="NodeLost"),
            id="a suspend overtaken by the host going away cannot be taken back",
        ),
    ],
)
def test_withdrawn(state: StopState, expected: StopState) -> None:
    assert withdrawn(state) == expected


@pytest.mark.parametrize(
    ("state", "abandoned", "expected"),
    [
        pytest.param(
            SUSPENDING, True, replace(ABANDONED, abandoned_time="t1"), id="failed STOP_TRIES times: abandoned"
        ),
        pytest.param(
            replace(SUSPENDING, withdrawn=True),
            False,
            StopState(None, None, False, None, "t1", True, None, 10, False),
            id="withdrawn: forgotten, not abandoned, the mark stays",
        ),
        pytest.param(
            replace(SUSPENDING, withdrawn=True),
            True,
            StopState(None, None, False, None, "t1", True, "t1", 10, False),
            id="withdrawn during the last failing try: abandoned",
        ),
        pytest.param(
            replace(SUSPENDING, lost_reason="Preempted"),
            False,
            StopState(None, "Preempted", False, None, "t1", False, None, 10, False),
            id="the host's lost reason is never forgotten",
        ),
        pytest.param(
            replace(SUSPENDING, requested_time=None),
            True,
            StopState(None, None, False, None, None, False, None, 10, False),
            id="abandoning a stop without requestedTime records none",
        ),
    ],
)
def test_given_up(state: StopState, abandoned: bool, expected: StopState) -> None:
    assert given_up(state, abandoned=abandoned) == expected


@pytest.mark.parametrize(
    ("state", "now", "expected"),
    [
        pytest.param(STOPPING, NOW, 30.0, id="no deadline: the stop's grace"),
        pytest.param(SUSPENDING, NOW, 10.0, id="deadline beyond the grace"),
        pytest.param(SUSPENDING, at(55), 5.0, id="deadline nearer than the grace"),
        pytest.param(SUSPENDING, at(60), 0.0, id="deadline now"),
        pytest.param(SUSPENDING, at(3600), 0.0, id="deadline in the past: SIGKILL at once, never negative"),
        pytest.param(PREEMPTED, at(40), 10.0, id="a host's deadline was its checkpoint's: the grace is the 20%"),
        pytest.param(PREEMPTED, at(3600), 10.0, id="a host's grace whatever the time"),
        pytest.param(
            replace(SUSPENDING, lost_reason="NodeLost", grace_seconds=0),
            NOW,
            0.0,
            id="no notice during a suspend",
        ),
    ],
)
def test_grace(state: StopState, now: datetime, expected: float) -> None:
    assert grace(state, now) == expected


@pytest.mark.parametrize(
    ("state", "spec", "checkpointed", "expected"),
    [
        pytest.param(SUSPENDING, {}, False, "none", id="no checkpointer"),
        pytest.param(STOPPING, {}, True, "none", id="a stop that asks for no checkpoint"),
        pytest.param(SUSPENDING, {}, True, "suspend", id="a suspend"),
        pytest.param(SUSPENDING, {"gang": {"size": 2}}, True, "suspend", id="a gang rank's suspend"),
        pytest.param(PREEMPTED, {}, True, "notice", id="a host's notice"),
        pytest.param(PREEMPTED, {"gang": {"size": 2}}, True, "gang-notice", id="a gang's notice"),
        pytest.param(PREEMPTED, {"gang": None}, True, "notice", id="an empty gang is no gang"),
        pytest.param(PREEMPTED, {"gang": {"size": 2}}, False, "none", id="a gang's notice without checkpointer"),
        pytest.param(
            replace(STOPPING, lost_reason="NodeLost", grace_seconds=0), {}, True, "none", id="no notice: no checkpoint"
        ),
        pytest.param(ABANDONED, {}, True, "none", id="given up"),
    ],
)
def test_checkpoint_plan(state: StopState, spec: dict[str, object], checkpointed: bool, expected: str) -> None:
    assert checkpoint_plan(state, spec, checkpointed=checkpointed) == expected


@pytest.mark.parametrize(
    ("lost_reason", "expected"),
    [("Preempted", "Preemption"), ("NodeLost", "HostGone"), ("AttemptDeleted", "HostGone")],
)
def test_notice_kind(lost_reason: str, expected: str) -> None:
    assert notice_kind(replace(PREEMPTED, lost_reason=lost_reason)) == expected


@pytest.mark.parametrize(
    ("state", "failures", "now", "expected"),
    [
        pytest.param(SUSPENDING, 1, NOW, "retry", id="first failure"),
        pytest.param(SUSPENDING, STOP_TRIES - 1, NOW, "retry", id="one try left"),
        pytest.param(SUSPENDING, STOP_TRIES, NOW, "keep-running", id="STOP_TRIES failures"),
        pytest.param(SUSPENDING, STOP_TRIES + 1, NOW, "keep-running", id="more than STOP_TRIES"),
        pytest.param(SUSPENDING, 1, at(60), "stop", id="deadline reached"),
        pytest.param(SUSPENDING, STOP_TRIES, at(61), "stop", id="deadline passed beats giving up"),
        pytest.param(replace(SUSPENDING, deadline=None), STOP_TRIES - 1, at(10**6), "retry", id="no deadline"),
        pytest.param(
            replace(SUSPENDING, lost_reason="Preempted"), STOP_TRIES, NOW, "stop", id="host going away meanwhile"
        ),
        pytest.param(
            replace(SUSPENDING, withdrawn=True), 1, NOW, "retry", id="withdrawn: the next try's check keeps it running"
        ),
    ],
)
def test_after_failed_checkpoint(state: StopState, failures: int, now: datetime, expected: str) -> None:
    assert after_failed_checkpoint(state, failures, now) == expected


def exited(
    code: int | None = None,
    signal: int | None = None,
    *,
    stopped: bool = False,
    oom: bool = False,
    evicted: str | None = None,
    measured: str = "",
) -> Exit:
    return Exit(code, signal, oom_killed=oom, stopped=stopped, evicted=evicted, evicted_message=measured)


RECLAIMED = "The provider reclaimed the host ({}); the program was stopped before it went away."
WENT_AWAY = "The host went away; the program was stopped before it did."


@pytest.mark.parametrize(
    ("state", "end", "interruptible", "expected"),
    [
        pytest.param(IDLE, exited(0), None, Terminal("Succeeded", "Completed", "Exit code 0.", collect_outputs=True)),
        pytest.param(
            STOPPING,
            exited(0),
            None,
            Terminal("Succeeded", "Completed", "Exit code 0.", collect_outputs=True),
            id="exit 0 by itself with a stop pending succeeds",
        ),
        pytest.param(
            STOPPING,
            exited(0, stopped=True),
            None,
            Terminal("Stopped", "Stopped", "Stopped (Stopped)."),
            id="stopped 0",
        ),
        pytest.param(
            IDLE,
            exited(0, stopped=True),
            None,
            Terminal("Failed", "Error", "Exit code 0.", with_log_tail=True),
            id="stopped with no stop reason is no success",
        ),
        pytest.param(
            PREEMPTED,
            exited(0),
            True,
            Terminal("Lost", "Preempted", RECLAIMED.format("interruptible capacity")),
            id="exit 0 as the host goes away is lost",
        ),
        pytest.param(
            PREEMPTED,
            exited(None, 15, stopped=True),
            None,
            Terminal("Lost", "Preempted", RECLAIMED.format("on-demand capacity")),
            id="preempted, placement unknown",
        ),
        pytest.param(
            PREEMPTED,
            exited(143, stopped=True),
            False,
            Terminal("Lost", "Preempted", RECLAIMED.format("on-demand capacity")),
            id="preempted on-demand",
        ),
        pytest.param(
            replace(SUSPENDING, lost_reason="NodeLost"),
            exited(0, stopped=True),
            True,
            Terminal("Lost", "NodeLost", WENT_AWAY),
            id="lost reason beats stopped",
        ),
        pytest.param(
            replace(PREEMPTED, lost_reason="AttemptDeleted"),
            exited(None, 9, oom=True, evicted="EphemeralStorageExceeded", measured="used 2Gi of 1Gi"),
            None,
            Terminal("Lost", "AttemptDeleted", WENT_AWAY),
            id="lost reason beats eviction and OOM",
        ),
        pytest.param(
            STOPPING,
            exited(None, 9, stopped=True, oom=True, evicted="EphemeralStorageExceeded", measured="used 2Gi of 1Gi"),
            None,
            Terminal("Stopped", "Stopped", "Stopped (Stopped)."),
            id="stopped beats evicted and OOM",
        ),
        pytest.param(
            IDLE,
            exited(None, 9, oom=True, evicted="EphemeralStorageExceeded", measured="used 2Gi of 1Gi"),
            None,
            Terminal("Failed", "EphemeralStorageExceeded", "Evicted: used 2Gi of 1Gi.", with_log_tail=True),
            id="evicted beats OOM",
        ),
        pytest.param(
            IDLE,
            exited(0, evicted="EphemeralStorageExceeded", measured="used 2Gi of 1Gi"),
            None,
            Terminal("Succeeded", "Completed", "Exit code 0.", collect_outputs=True),
            id="exit 0 by itself beats a late eviction",
        ),
        pytest.param(
            IDLE,
            exited(None, 9, oom=True),
            None,
            Terminal("Failed", "OOMKilled", "Killed: out of memory.", with_log_tail=True),
            id="OOM",
        ),
        pytest.param(
            STOPPING,
            exited(137, oom=True),
            None,
            Terminal("Failed", "OOMKilled", "Killed: out of memory.", with_log_tail=True),
            id="OOM while a stop is pending",
        ),
        pytest.param(
            IDLE,
            exited(None, 9),
            None,
            Terminal("Failed", "Error", "Killed by signal 9.", with_log_tail=True),
            id="killed by a signal",
        ),
        pytest.param(
            SUSPENDING,
            exited(1),
            None,
            Terminal("Failed", "Error", "Exit code 1.", with_log_tail=True),
            id="crashed during its suspend's checkpoint",
        ),
    ],
)
def test_terminal(state: StopState, end: Exit, interruptible: bool | None, expected: Terminal) -> None:
    assert terminal(state, end, interruptible) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(STOPPING, Terminal("Stopped", "Stopped", "Stopped (Stopped)."), id="a user stop"),
        pytest.param(SUSPENDING, Terminal("Stopped", "Stopped", "Stopped (Suspended)."), id="a suspend"),
        pytest.param(PREEMPTED, Terminal("Lost", "Preempted", "The host went away."), id="the host"),
        pytest.param(
            replace(SUSPENDING, lost_reason="AttemptDeleted"),
            Terminal("Lost", "AttemptDeleted", "The host went away."),
            id="lost beats stopped",
        ),
    ],
)
def test_stopped_early(state: StopState, expected: Terminal) -> None:
    assert stopped_early(state) == expected


def test_a_suspend_that_cannot_checkpoint_keeps_running_until_a_new_request() -> None:
    """The loop as running.py drives it: STOP_TRIES failures, given up, the same spec.stop ignored on every converge,
    a new requestedTime taken, then the host's notice overriding it."""
    state = requested(IDLE, SUSPEND, NOW)
    assert checkpoint_plan(state, {}, checkpointed=True) == "suspend"
    choices = [after_failed_checkpoint(state, failures, NOW) for failures in range(1, STOP_TRIES + 1)]
    assert choices == ["retry"] * (STOP_TRIES - 1) + ["keep-running"]
    state = given_up(state, abandoned=True)
    assert not state.pending and state.stop_reason is None
    assert requested(state, SUSPEND, at(1)) == state
    state = requested(state, replace(SUSPEND, requested_time="t2"), at(2))
    assert state.pending and state.requested_time == "t2" and state.abandoned_time == "t1"
    state = requested(state, preempt(10), at(3))
    assert checkpoint_plan(state, {}, checkpointed=True) == "notice"
    assert after_failed_checkpoint(state, 1, at(3)) == "stop"
    assert grace(state, at(100)) == pytest.approx(2.0)
    assert terminal(state, exited(None, 15, stopped=True), True).phase == "Lost"
