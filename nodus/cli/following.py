"""Following a Job to its end: what ``nodus run`` shows after the create and what ``nodus attach`` shows.

A :class:`Follower` watches the Job (a field selector on its name) and its Attempts (the ``nodus.dev/job``
label), and reports through a :class:`~nodus.cli.followoutput.Output` as things happen:

* the Job's phase changes (with the reason and message the status gives, and the offering once placed);
* ``status.progress``: units completed of total, the rate and ETA measured here over the last minute,
  and the latest metrics;
* the logs of index 0 (``--logs all``: of every index, each line prefixed ``[i]``; a gang's other ranks
  ``[i/r]``), attempt after attempt: each Attempt's log is followed from its first line until it ends;
* checkpoints (``status.checkpoint.seq`` moving) and recoveries (an Attempt ending ``Lost``, whatever took
  its host: a preemption, a drain, a lost node; then its replacement running) as one-line events;
* once the Job has finished: its final cost (waiting a little for the final charge to post) and outputs
  with the command that downloads each.

Watches resume from the last resourceVersion they saw when the server ends them, list again when the
version has expired (410), and retry when the connection drops, so a long run survives an API server
restart. The follower never changes the Job: detaching (Ctrl-C) leaves it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from nodus.apis.v1 import labels, objects
from nodus.apis.v1.phases import ATTEMPT_FINISHED, JOB_FINISHED
from nodus.cli.followoutput import Output, Snapshot, size_text

# How long a finished Job's log streams may take to deliver their last lines, and the final charge to post.
SETTLE_SECONDS = 20.0
WATCH_SECONDS = 300
RETRY_SECONDS = 1.0
RATE_WINDOW_SECONDS = 60.0


class JobDeleted(Exception):
    """The followed Job was deleted while it was followed."""


@dataclass
class Rate:
    """Units per second over the last ``window`` seconds of observations (the clock is the caller's)."""

    window: float = RATE_WINDOW_SECONDS
    samples: list[tuple[float, int]] = field(default_factory=list)

    def observe(self, at: float, completed: int) -> None:
        if self.samples and completed < self.samples[-1][1]:
            self.samples.clear()  # restored from an earlier checkpoint: the count went back
        if not self.samples or completed != self.samples[-1][1]:
            self.samples.append((at, completed))
        while len(self.samples) > 2 and at - self.samples[0][0] > self.window:
            self.samples.pop(0)

    def per_second(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, c0), (t1, c1) = self.samples[0], self.samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 and c1 > c0 else None


class Follower:
    """Follows one Job until it finishes (:meth:`run` returns its last state as JSON).

    ``logs`` is ``"0"``, ``"all"`` or ``"none"``; ``replay`` follows the logs of Attempts that had already
    ended when following began (``nodus run``: the Job is new, so nothing it printed is missed); without it
    only live Attempts' logs are shown (``nodus attach``)."""

    def __init__(
        self,
        client: Any,
        project: str,
        name: str,
        output: Output,
        *,
        logs: str = "0",
        replay: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.project, self.name, self.output = client, project, name, output
        self.logs, self.replay, self.clock = logs, replay, clock
        self.rate = Rate()
        self.final: dict[str, Any] | None = None
        self.finished = asyncio.Event()
        self.settled = asyncio.Event()
        self._phase: str | None = None
        self._checkpoint: int | None = None
        self._attempts: dict[str, str | None] = {}
        self._recovering: dict[tuple[int, int | None], str] = {}
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._first_job = True

    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Follow from ``job`` (as just read or created) to the end; returns the Job as last seen. Raises
        :class:`JobDeleted`, or the client's errors other than a dropped connection."""
        self._on_job(job)
        watches = [
            asyncio.ensure_future(self._watch_job(_version(job))),
            asyncio.ensure_future(self._watch_attempts()),
        ]
        finished = asyncio.ensure_future(self.finished.wait())
        try:
            await asyncio.wait([finished, *watches], return_when=asyncio.FIRST_COMPLETED)
            for task in watches:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            # Finished: the last log lines and the final charge arrive a moment later.
            streams = list(self._streams.values())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SETTLE_SECONDS):
                    await asyncio.gather(self.settled.wait(), *streams, return_exceptions=True)
        finally:
            tasks: list[asyncio.Future[Any]] = [finished, *watches, *self._streams.values()]
            for pending in tasks:
                pending.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert self.final is not None
        return self.final

    # The Job

    async def _watch_job(self, version: str) -> None:
        selector = f"metadata.name={self.name}"
        async for event in self._events("jobs", version, field_selector=selector):
            if event.type == "DELETED":
                raise JobDeleted(f"job/{self.name} was deleted")
            self._on_job(event.object)
            if self.settled.is_set():
                return

    def _on_job(self, obj: dict[str, Any]) -> None:
        job = objects.read(objects.Job, obj)
        status = job.status
        phase = status.phase
        if phase != self._phase:
            self._phase = phase
            if phase not in JOB_FINISHED:  # the summary says how it ended, after the last log lines
                self.output.phase(self.name, str(phase), _phase_detail(job))
        checkpoint = status.checkpoint
        if checkpoint is not None and checkpoint.seq is not None and checkpoint.seq != self._checkpoint:
            # attach: a checkpoint committed before following began is no news
            if not self._first_job or self.replay:
                size = f" ({size_text(checkpoint.size)})" if checkpoint.size else ""
                self.output.event("checkpoint", f"checkpoint {checkpoint.seq} committed{size}")
            self._checkpoint = checkpoint.seq
        self._first_job = False
        progress = status.progress
        units = progress.units if progress is not None else None
        if units is not None and units.completed is not None:
            self.rate.observe(self.clock(), units.completed)
        metrics = dict(progress.metrics or {}) if progress is not None else {}
        if units is not None or metrics:
            self.output.progress(
                Snapshot(
                    completed=units.completed if units is not None else None,
                    total=units.total if units is not None else None,
                    per_second=self.rate.per_second(),
                    metrics=metrics,
                )
            )
        if phase in JOB_FINISHED:
            self.final = obj
            self.finished.set()
            cost = status.cost
            if cost is None or cost.final:
                self.settled.set()

    # Attempts and their logs

    async def _watch_attempts(self) -> None:
        selector = f"{labels.JOB}={self.name}"
        listed = await self.client.list("attempts", self.project, label_selector=selector)
        for item in sorted(listed.get("items") or [], key=_attempt_order):
            self._on_attempt(item, first=True)
        version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        async for event in self._events("attempts", version, label_selector=selector):
            if event.type != "DELETED":
                self._on_attempt(event.object, first=False)

    def _on_attempt(self, obj: dict[str, Any], *, first: bool) -> None:
        attempt = objects.read(objects.Attempt, obj)
        name, spec, status = attempt.metadata.name, attempt.spec, attempt.status
        key = (spec.index, spec.rank)
        phase = status.phase
        known = name in self._attempts
        previous = self._attempts.get(name)
        self._attempts[name] = phase
        if not known and self._follows_logs(spec.index, spec.rank) and (self.replay or phase not in ATTEMPT_FINISHED):
            self._streams[name] = asyncio.ensure_future(self._stream_log(name, _prefix(self.logs, key)))
        if phase == previous or (first and not self.replay):
            return
        if phase == "Running" and key in self._recovering:
            ended = self._recovering.pop(key)
            restored = status.checkpoint.restored_from_seq if status.checkpoint is not None else None
            start = f"restored checkpoint {restored}" if restored else "from the start"
            node = f" on {spec.node}" if spec.node else ""
            self.output.event("recovery", f"recovered: {name} runs{node} ({start}) after {ended}")
        elif phase == "Lost":
            why = f" ({status.reason})" if status.reason else ""
            message = f": {status.message.rstrip('. ')}" if status.message else ""
            self._recovering[key] = f"{name} was lost{why}"
            # Lost: its host went away (a preemption, a drain, a lost node) or could not run it (an image pull);
            # the Job's next phase (Recovering, or Failed once recovery is exhausted) says what follows.
            self.output.event("lost", f"attempt {name} ended Lost{why}{message}")
        elif phase == "Failed" and self._phase not in JOB_FINISHED:
            code = f" with exit code {status.exit_code}" if status.exit_code is not None else ""
            reason = f" ({status.reason})" if status.reason else ""
            self.output.event("failed", f"attempt {name} failed{code}{reason}")

    def _follows_logs(self, index: int, rank: int | None) -> bool:
        if self.logs == "all":
            return True
        return self.logs == "0" and index == 0 and not rank

    async def _stream_log(self, attempt: str, prefix: str) -> None:
        """Print one Attempt's log from its first line until it ends (retrying a dropped connection from the
        line after the last one printed)."""
        import httpx

        from nodus.client import errors, rest

        path = rest.path("attempts", self.project, attempt, "log")
        printed = 0
        while True:
            try:
                seen = 0
                async with contextlib.aclosing(self.client.stream_lines(path, {"follow": "true"})) as lines:
                    async for line in lines:
                        seen += 1
                        if seen > printed:
                            printed = seen
                            self.output.log(prefix, line)
                return
            except errors.NotFound:
                return  # the attempt was deleted with its Job
            except (httpx.TransportError, errors.APIError) as exc:
                if isinstance(exc, errors.APIError) and exc.status < 500 and exc.status != 429:
                    self.output.event("failed", f"logs of {attempt}: {exc.reason}: {exc.message}")
                    return
                await asyncio.sleep(RETRY_SECONDS)

    # Watching

    async def _events(self, plural: str, version: str, **selectors: str) -> AsyncIterator[Any]:
        """Events of a watch kept open: resumed after the server ends it, re-listed after a 410, retried after a
        dropped connection (one note, once, until it answers again)."""
        import httpx

        from nodus.client import errors

        lost = False
        while True:
            try:
                async with contextlib.aclosing(
                    self.client.watch(
                        plural, self.project, resource_version=version, timeout_seconds=WATCH_SECONDS, **selectors
                    )
                ) as events:
                    async for event in events:
                        if lost:
                            lost = False
                            self.output.event("note", "connection to the API server restored")
                        version = event.resource_version or version
                        if event.type != "BOOKMARK":
                            yield event
            except errors.Gone:
                listed = await self.client.list(plural, self.project, **_list_selectors(selectors))
                version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                for item in listed.get("items") or []:
                    yield _Event("MODIFIED", item)
            except (httpx.TransportError, errors.APIError) as exc:
                if isinstance(exc, errors.APIError) and exc.status < 500 and exc.status != 429:
                    raise
                if not lost:
                    lost = True
                    self.output.event("note", f"lost the connection to the API server ({type(exc).__name__}); retrying")
                await asyncio.sleep(RETRY_SECONDS)


@dataclass(frozen=True)
class _Event:
    type: str
    object: dict[str, Any]


def _list_selectors(selectors: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in selectors.items() if key in ("label_selector", "field_selector")}


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _attempt_order(obj: dict[str, Any]) -> tuple[int, int, int]:
    spec = obj.get("spec") or {}
    return int(spec.get("index") or 0), int(spec.get("number") or 0), int(spec.get("rank") or 0)


def _prefix(logs: str, key: tuple[int, int | None]) -> str:
    if logs != "all":
        return ""
    index, rank = key
    return f"[{index}] " if rank is None else f"[{index}/{rank}] "


def _phase_detail(job: objects.Job) -> str:
    """What the status says about the phase just entered: placement while running, the reason otherwise."""
    status = job.status
    parts: list[str] = []
    if status.phase == "Running" and status.placement is not None and status.placement.offering:
        rate = f", {status.placement.rate_usd_per_hour} USD/h" if status.placement.rate_usd_per_hour else ""
        parts.append(f"on {status.placement.offering}{rate}")
    if status.reason and status.phase not in ("Succeeded",):
        parts.append(f"{status.reason}: {status.message}" if status.message else status.reason)
    return "; ".join(parts)
