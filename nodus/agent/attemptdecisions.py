"""An attempt's stop, checkpoint and end decisions as pure functions of (spec, stop request, process state, now).

The run of an attempt (``nodus.agent.running``) carries these decisions out; this module only makes them. Nothing
here reads a clock, touches a file or awaits: ``now`` is a parameter and every transition returns a new, frozen
:class:`StopState`. The contract, in the order a run meets it:

* :func:`requested`: a stop arrives (``spec.stop``, a host going away, the Attempt deleted). The first stop reason
  wins; a host going away (``lost_reason``) is recorded once and, with more than 1 s of notice, checkpoints first
  until 80 % of the notice has gone, leaving 20 % as the stop's grace. A stop whose ``requested_time`` was abandoned
  is ignored, so the same ``spec.stop`` seen again does not start the same doomed checkpoint loop.
* :func:`withdrawn`: the user took the stop back (a suspend undone); a host going away cannot be taken back.
* :func:`checkpoint_plan`, then :func:`after_failed_checkpoint` after each failed try of a suspend's checkpoint, and
  :func:`given_up` when the program keeps running after all.
* :func:`grace`: how long the program gets between SIGTERM and SIGKILL.
* :func:`terminal` once the program has ended, or :func:`stopped_early` when the stop came before it started.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from nodus.agent.checkpointing import STOP_TRIES

if TYPE_CHECKING:
    from nodus.agent.runtime import Exit

# The grace a stop has before any request set one (SIGTERM, then SIGKILL this many seconds later).
DEFAULT_GRACE = 30.0
# A host going away with more notice than this checkpoints first: with less there is no time to.
NOTICE_FOR_CHECKPOINT = 1.0
# The shares of a host's notice its checkpoint may take, and the program's grace after SIGTERM then has.
NOTICE_CHECKPOINT_SHARE = 0.8
NOTICE_GRACE_SHARE = 0.2

CheckpointPlan = Literal["none", "notice", "gang-notice", "suspend"]
AfterFailure = Literal["retry", "stop", "keep-running"]


@dataclass(frozen=True)
class StopRequest:
    """One request to stop the program, as ``AttemptRun.request_stop`` receives it.

    ``lost_reason`` set: the host is going away (or the Attempt was deleted) and the attempt ends ``Lost`` with
    that reason. ``checkpoint``: a user stop (a suspend) that checkpoints first, until ``deadline`` if set.
    ``requested_time`` is ``spec.stop.requestedTime``: it names the request (and a gang's matching shards)."""

    reason: str
    grace_seconds: float
    lost_reason: str | None = None
    checkpoint: bool = False
    deadline: datetime | None = None
    requested_time: str | None = None


@dataclass(frozen=True)
class StopState:
    """Everything known about stopping the attempt; the initial value is ``StopState()`` (nothing asked).

    ``pending`` is the "stop requested" signal the run waits on (set by a request, cleared when the program keeps
    running after all). ``checkpoint_first`` and ``deadline``: checkpoint before stopping, until then.
    ``abandoned_time``: the ``requested_time`` of a stop given up after its checkpoint failed STOP_TRIES times."""

    stop_reason: str | None = None
    lost_reason: str | None = None
    checkpoint_first: bool = False
    deadline: datetime | None = None
    requested_time: str | None = None
    withdrawn: bool = False
    abandoned_time: str | None = None
    grace_seconds: float = DEFAULT_GRACE
    pending: bool = False


@dataclass(frozen=True)
class Terminal:
    """The attempt's terminal report. ``message`` says how it ended; with ``with_log_tail`` the caller appends
    " Last log lines:" and the last lines when there are any. ``collect_outputs``: collect the outputs first (a
    failure to collect turns the report into ``Failed`` with the collection's own reason)."""

    phase: str
    reason: str
    message: str
    with_log_tail: bool = False
    collect_outputs: bool = False


def requested(state: StopState, request: StopRequest, now: datetime) -> StopState:
    """The state after ``request`` arrives at ``now``.

    A first ``lost_reason`` is recorded, whatever stop is under way: with notice above 1 s it replaces any stop's
    checkpoint plan with the notice's (checkpoint until now + 80 % of the notice, grace 20 % of it); with less notice
    the grace becomes at most the notice (a host lost with no notice gives the program none). A host going away
    also ends a withdrawal: it cannot be taken back. A later ``lost_reason`` changes nothing of the host's.
    Then, unless a stop reason is already set or the request's ``requested_time`` was abandoned, the request becomes
    the stop (its reason, requested_time, not withdrawn) and, when it is not the host's, its grace, checkpoint and
    deadline. ``pending`` is set whenever either part took effect."""
    if request.lost_reason is not None and state.lost_reason is None:
        notice = request.grace_seconds
        if notice > NOTICE_FOR_CHECKPOINT:
            state = dataclasses.replace(
                state,
                lost_reason=request.lost_reason,
                checkpoint_first=True,
                deadline=now + timedelta(seconds=notice * NOTICE_CHECKPOINT_SHARE),
                grace_seconds=notice * NOTICE_GRACE_SHARE,
                withdrawn=False,
                pending=True,
            )
        else:
            # With no time to checkpoint the program gets what notice there is, never more (a stop under way
            # keeps a shorter grace of its own).
            grace_seconds = min(state.grace_seconds, notice)
            state = dataclasses.replace(
                state, lost_reason=request.lost_reason, grace_seconds=grace_seconds, withdrawn=False, pending=True
            )
    abandoned = request.requested_time is not None and request.requested_time == state.abandoned_time
    if state.stop_reason is not None or abandoned:
        return state
    state = dataclasses.replace(
        state, stop_reason=request.reason, requested_time=request.requested_time, withdrawn=False, pending=True
    )
    if request.lost_reason is None:
        state = dataclasses.replace(
            state,
            grace_seconds=request.grace_seconds,
            checkpoint_first=request.checkpoint,
            deadline=request.deadline,
        )
    return state


def withdrawn(state: StopState) -> StopState:
    """The user's stop taken back before the program was stopped: a checkpoint loop seeing it keeps the program
    running. Nothing changes without a stop, or when the host is going away."""
    if state.stop_reason is not None and state.lost_reason is None:
        return dataclasses.replace(state, withdrawn=True)
    return state


def given_up(state: StopState, *, abandoned: bool) -> StopState:
    """The program keeps running after all (the stop's checkpoint was withdrawn, or failed STOP_TRIES times:
    ``abandoned``, and that stop's ``requested_time`` is not tried again). The stop is forgotten (reason,
    checkpoint, deadline, the pending signal); the host's lost reason, the grace and the withdrawn mark stay."""
    state = dataclasses.replace(state, stop_reason=None, checkpoint_first=False, deadline=None, pending=False)
    if abandoned:
        state = dataclasses.replace(state, abandoned_time=state.requested_time)
    return state


def grace(state: StopState, now: datetime) -> float:
    """Seconds between SIGTERM and SIGKILL when the program is stopped at ``now``: the stop's grace, cut to what is
    left before a user stop's deadline (never below 0). A host's deadline was already spent by its checkpoint."""
    if state.deadline is not None and state.lost_reason is None:
        return min(state.grace_seconds, max((state.deadline - now).total_seconds(), 0.0))
    return state.grace_seconds


def checkpoint_plan(state: StopState, spec: Mapping[str, Any], *, checkpointed: bool) -> CheckpointPlan:
    """The checkpoint a pending stop takes before the program is stopped.

    ``checkpointed``: the run holds a checkpointer (the attempt's continuity is Checkpointed). ``"none"``: stop at
    once. ``"gang-notice"``: a gang rank's host is going away; the rank reports the notice and waits (until the
    deadline) for its shard of the gang's checkpoint. ``"notice"``: one checkpoint within the notice (its kind from
    :func:`notice_kind`). ``"suspend"``: the user's stop, tried until :func:`after_failed_checkpoint` says otherwise;
    a gang rank's suspend names ``state.requested_time`` as its request, which matches the ranks' shards."""
    if not checkpointed or not state.checkpoint_first:
        return "none"
    if state.lost_reason is not None:
        return "gang-notice" if spec.get("gang") else "notice"
    return "suspend"


def notice_kind(state: StopState) -> str:
    """The checkpoint's kind (its record's trigger) for a host going away."""
    return {"Preempted": "Preemption", "Drained": "Drain"}.get(state.lost_reason or "", "HostGone")


def after_failed_checkpoint(state: StopState, failures: int, now: datetime) -> AfterFailure:
    """What a suspend's checkpoint loop does after a try that did not commit, ``failures`` counting this one.

    ``"stop"``: the host is going away meanwhile, or the stop's deadline has passed (stop without the checkpoint;
    the failure is not counted). ``"keep-running"``: STOP_TRIES failures; the caller records them and calls
    :func:`given_up` with ``abandoned=True``. ``"retry"``: count the failure and try again after the back-off; before
    each try a ``state.withdrawn`` stop keeps running (:func:`given_up` with ``abandoned=False``)."""
    if state.lost_reason is not None:
        return "stop"
    if state.deadline is not None and now >= state.deadline:
        return "stop"
    if failures >= STOP_TRIES:
        return "keep-running"
    return "retry"


def terminal(state: StopState, end: Exit, interruptible: bool | None) -> Terminal:
    """How the attempt ended, from the stop state and the program's Exit; ``interruptible`` is the placement's.

    In order: a program that exited 0 by itself on a host that stays is ``Succeeded`` (outputs collected); a host
    going away makes it ``Lost`` whatever the exit (``Preempted`` names the capacity); a program stopped on request
    is ``Stopped`` (even with exit 0); else ``Failed``: evicted by the runtime (its reason) before OOMKilled before
    ``Error`` with the exit code or the signal, each with the last log lines."""
    if end.code == 0 and not end.stopped and state.lost_reason is None:
        return Terminal("Succeeded", "Completed", "Exit code 0.", collect_outputs=True)
    if state.lost_reason == "Preempted":
        capacity = "interruptible capacity" if interruptible else "on-demand capacity"
        message = f"The provider reclaimed the host ({capacity}); the program was stopped before it went away."
        return Terminal("Lost", "Preempted", message)
    if state.lost_reason == "Drained":
        message = "The host is being drained; the program was stopped to run elsewhere from its checkpoint."
        return Terminal("Lost", "Drained", message)
    if state.lost_reason is not None:
        return Terminal("Lost", state.lost_reason, "The host went away; the program was stopped before it did.")
    if end.stopped and state.stop_reason is not None:
        return Terminal("Stopped", "Stopped", f"Stopped ({state.stop_reason}).")
    if end.evicted:
        return Terminal("Failed", end.evicted, f"Evicted: {end.evicted_message}.", with_log_tail=True)
    if end.oom_killed:
        return Terminal("Failed", "OOMKilled", "Killed: out of memory.", with_log_tail=True)
    how = f"Exit code {end.code}." if end.code is not None else f"Killed by signal {end.signal}."
    return Terminal("Failed", "Error", how, with_log_tail=True)


def stopped_early(state: StopState) -> Terminal:
    """The terminal report of an attempt stopped before its program started (while pulling, preparing, restoring
    or meeting its gang), or whose init command was stopped: ``Lost`` when the host is going away, else
    ``Stopped`` with the stop's reason."""
    if state.lost_reason is not None:
        return Terminal("Lost", state.lost_reason, "The host went away.")
    return Terminal("Stopped", "Stopped", f"Stopped ({state.stop_reason}).")
