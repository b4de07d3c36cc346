"""One Attempt on a fake host: the status reports a real agent's run writes, on a clock instead of a program.

A fake run writes what ``nodus.agent.running`` writes, through the same decisions (``nodus.agent.attemptdecisions``):
``Starting`` (the runtime ``fake`` and the visible GPUs), ``Running`` (``startTime``, ``inputsReadyTime``), then one
terminal report with ``finishTime``, ``exitCode``/``signal``, phase, reason and message. The "program" runs for
:data:`DURATION_ENV` (a duration, ``30s``; the fake-host process's default when unset) and then exits with
:data:`EXIT_CODE_ENV` (default 0). Both are read from the Attempt's ``spec.env``, which the Job controller copies
from the Job: what a node may read of its Attempts, so the fake host needs no other credential to learn them.

A stop (``spec.stop``, or the host going away) ends the program at once, as a program that exits on SIGTERM; there
are no checkpoints, logs, inputs or outputs. A killed host's runs are cancelled (:meth:`FakeRun.kill`) and write
nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from nodus.agent import attemptdecisions as decisions
from nodus.agent.runtime import Exit
from nodus.apimachinery import units
from nodus.apis.v1 import objects

Object = dict[str, Any]
log = logging.getLogger("nodus.cloud.fakehosts")

DURATION_ENV = "FAKEHOST_DURATION"
EXIT_CODE_ENV = "FAKEHOST_EXIT_CODE"
SANDBOX = "fake"
SIGTERM = 15

# Sends one status patch of ``attempt``; ``terminal`` ones are retried until they land (or the Attempt is gone).
Reporter = Callable[[Object, Object, bool], Awaitable[None]]


def behaviour(attempt: Object, default: timedelta) -> tuple[float, int]:
    """The fake program's run time in seconds and exit code, from the Attempt's env (see the module docstring); a
    value that does not parse is ignored (the default is used) rather than failing the attempt."""
    env = {e.get("name"): e.get("value") for e in (attempt.get("spec") or {}).get("env") or () if isinstance(e, dict)}
    seconds = default.total_seconds()
    code = 0
    try:
        if env.get(DURATION_ENV):
            seconds = units.parse_duration(str(env[DURATION_ENV])).total_seconds()
    except ValueError:
        log.warning("attempt %s: %s=%r is not a duration", attempt["metadata"]["name"], DURATION_ENV, env[DURATION_ENV])
    text = str(env.get(EXIT_CODE_ENV) or "0")
    if text.isdigit():
        code = int(text)
    return seconds, code


class FakeRun:
    """The run of one Attempt on a fake host; ``start`` it once, feed it the Attempt as it changes (``update``)."""

    def __init__(self, attempt: Object, gpus: tuple[int, ...], report: Reporter, default: timedelta) -> None:
        self.attempt = attempt
        self.gpus = gpus
        self._report = report
        self._duration, self._code = behaviour(attempt, default)
        self.stop = decisions.StopState()
        self._stopped = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def view(self) -> objects.Attempt:
        return objects.read(objects.Attempt, self.attempt)

    @property
    def going(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"fake run {self.attempt['metadata']['name']}")

    def update(self, attempt: Object) -> None:
        self.attempt = attempt

    def request_stop(self, reason: str, grace_seconds: float, *, lost_reason: str | None = None) -> None:
        """Stop the program (it exits at once); with ``lost_reason`` the host is going away (the end is ``Lost``)."""
        request = decisions.StopRequest(reason, grace_seconds, lost_reason)
        self.stop = decisions.requested(self.stop, request, units.now())
        if self.stop.pending:
            self._stopped.set()

    def kill(self) -> None:
        """The host vanished: the run ends without another write."""
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        name = self.attempt["metadata"]["name"]
        try:
            await self._send({"phase": "Starting", "runtime": {"sandbox": SANDBOX}, "gpuIndexes": list(self.gpus)})
            if self._stopped.is_set():
                end = decisions.stopped_early(self.stop)
                await self._terminal(end, {"finishTime": _now()})
                return
            started = _now()
            await self._send({"phase": "Running", "startTime": started, "inputsReadyTime": started})
            try:
                await asyncio.wait_for(self._stopped.wait(), self._duration)
                ended = Exit(code=None, signal=SIGTERM, oom_killed=False, stopped=True)
            except TimeoutError:
                ended = Exit(code=self._code, signal=None, oom_killed=False, stopped=False)
            # Read raw: one field does not need the whole Attempt validated.
            placement = (self.attempt.get("status") or {}).get("placement") or {}
            end = decisions.terminal(self.stop, ended, placement.get("interruptible"))
            await self._terminal(end, {"finishTime": _now(), "exitCode": ended.code, "signal": ended.signal})
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fake run of %s failed", name)

    async def _send(self, status: Object) -> None:
        await self._report(self.attempt, status, False)

    async def _terminal(self, end: decisions.Terminal, extra: Object) -> None:
        # No program, so no log tail to append (``end.with_log_tail``) and no outputs to collect.
        status = {"phase": end.phase, "reason": end.reason, "message": end.message, **extra}
        await self._report(self.attempt, {k: v for k, v in status.items() if v is not None}, True)


def _now() -> str:
    return units.format_time(units.now())
