"""Attempt logs as the API keeps them: lines appended by agents, read page by page, followed until the end.

An attempt's lines are numbered (``seq``) in the order they were appended. A read applies its filters
(container, stream and since, then ``tail_lines``: the newest lines that passed) and returns at most
:data:`PAGE` lines at a time. :class:`LogReader` reads the first page eagerly (so that a failure is a Status,
not a stream cut short), then the rest; a followed log polls every :data:`POLL_SECONDS` and ends once the
attempt is in a terminal phase (or gone) and every line it had stored by then was read.

A Job's log is the log of one of its attempts, found by index, number and rank (:meth:`Logs.attempt_of`):
an attempt that does not exist yet is a 404 whose details carry ``retryAfterSeconds`` while the Job may still
start it, on which ``nodus logs -f`` waits (ADR 0039). ``nodus.api.http.logs`` serves both over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from nodus.api.errors import APIError
from nodus.api.registry import GROUP
from nodus.api.store import GenericStore
from nodus.apimachinery.selectors import parse_label_selector
from nodus.apis.v1 import labels, phases
from nodus.storage.listing import ListQuery
from nodus.storage.logs import STREAMS, AttemptLogs, LogEntry, LogLine
from nodus.storage.objects import Storage

# What a log's reader and writer name: the streams, an entry to append and a line read.
__all__ = ["STREAMS", "LogEntry", "LogLine", "LogOptions", "LogReader", "Logs"]

Object = dict[str, Any]

PAGE = 500
POLL_SECONDS = 0.3
# How long a reader of a Job's log should wait before asking again for an attempt that has not started yet.
RETRY_SECONDS = 1


@dataclass(frozen=True)
class LogOptions:
    """What a reader asked for (the query parameters, checked)."""

    follow: bool = False
    tail_lines: int | None = None
    since_time: datetime | None = None
    timestamps: bool = False
    limit_bytes: int | None = None
    stream: str | None = None  # None: both
    container: str | None = ""  # '': the main program; None: every container (allContainers)


class Logs:
    """The logs of every attempt: appended, read and followed."""

    def __init__(self, storage: Storage, attempts: GenericStore) -> None:
        self._storage = storage
        self._lines = AttemptLogs(storage)
        self._attempts = attempts

    async def append(self, attempt: Object, entries: Sequence[LogEntry]) -> None:
        """Append ``entries`` to the log of ``attempt`` (a stored Attempt), in order, at once."""
        metadata = attempt["metadata"]
        await self._lines.append(str(metadata["uid"]), metadata["namespace"], metadata["name"], entries)

    async def open(self, attempt: Object, options: LogOptions) -> LogReader:
        """The log of ``attempt`` as ``options`` ask, its first page read."""
        reader = LogReader(self._lines, self._attempts, attempt, options)
        await reader.start()
        return reader

    async def attempt_of(self, job: Object, index: int, number: int | None, rank: int = 0) -> Object:
        """The Job's attempt ``number`` of ``index`` (the highest number when None), for a gang its ``rank``; a
        404 Status when none."""
        namespace, name, uid = job["metadata"]["namespace"], job["metadata"]["name"], job["metadata"].get("uid")
        query = ListQuery(
            kind=self._attempts.info.kind,
            namespace=namespace,
            labels=parse_label_selector(f"{labels.JOB}={name},{labels.INDEX}={index}"),
        )
        candidates: dict[int, Object] = {}
        async with self._storage.open_list(query) as cursor:
            async for batch in cursor.batches():
                for _, _, body in batch:
                    obj = orjson.loads(body)
                    spec = obj.get("spec") or {}
                    # An attempt left over from an earlier Job of the same name is not this Job's.
                    if spec.get("jobUID") not in (None, uid) or not isinstance(spec.get("number"), int):
                        continue
                    if spec.get("rank") is not None and spec["rank"] != rank:
                        continue  # another rank of a gang epoch
                    candidates[spec["number"]] = obj
        fix = (
            f"`kubectl get attempts -n {namespace} -l {labels.JOB}={name}` lists the Job's attempts; an index gets "
            "its first attempt when the Job controller starts it."
        )
        details: dict[str, Any] = {"name": name, "group": GROUP, "kind": "jobs"}
        spec = job.get("spec") or {}
        indexes = int(spec.get("completions") or 1)
        if index >= indexes:
            raise APIError(
                "NotFound",
                f'job "{name}" has no index {index}: its indexes are 0 to {indexes - 1}',
                fix=f"Pass an index below spec.completions ({indexes}).",
                details=details,
            )
        if not candidates or (number is not None and number > max(candidates)):
            # The attempt may still come: say so the way Kubernetes says "try again" (StatusDetails), which
            # `nodus logs -f` waits on (ADR 0039). A finished or deleted Job, or a gang rank it lacks, never gets one.
            ranks = int((spec.get("distributed") or {}).get("nodes") or 1)
            if rank < ranks and not _finished_job(job):
                details["retryAfterSeconds"] = RETRY_SECONDS
        if not candidates:
            raise APIError("NotFound", f'job "{name}" has no attempt for index {index} yet', fix=fix, details=details)
        if number is None:
            return candidates[max(candidates)]
        if number not in candidates:
            have = ", ".join(str(n) for n in sorted(candidates))
            plural = "s" if len(candidates) > 1 else ""
            raise APIError(
                "NotFound",
                f'job "{name}" has no attempt {number} for index {index}; it has attempt{plural} {have}',
                fix=fix,
                details=details,
            )
        return candidates[number]


class LogReader:
    """The log of one attempt as one request wants it: the first page eagerly (:meth:`start`), then the rest."""

    def __init__(self, lines: AttemptLogs, attempts: GenericStore, attempt: Object, options: LogOptions) -> None:
        metadata = attempt["metadata"]
        self._lines = lines
        self._attempts = attempts
        self._namespace, self._name = str(metadata.get("namespace", "")), str(metadata["name"])
        self._uid = str(metadata["uid"])
        self._options = options
        self._first: list[LogLine] = []
        self._position = 0

    @property
    def name(self) -> str:
        """Whose log this is, for the server's own log: ``attempt PROJECT/NAME``."""
        return f"attempt {self._namespace}/{self._name}"

    async def start(self) -> None:
        options = self._options
        head = await self._lines.last_seq(self._uid) if options.tail_lines is not None else 0
        self._first = await self._lines.read(
            self._uid,
            since_time=options.since_time,
            tail_lines=options.tail_lines,
            stream=options.stream,
            container=options.container,
            limit=PAGE,
        )
        last = self._first[-1].seq if self._first else 0
        # A short tail page holds every line up to ``head`` that passed the filters: follow after it.
        self._position = last if len(self._first) == PAGE else max(head, last)

    async def _finished(self) -> bool:
        obj = await self._attempts.find(self._namespace, self._name)
        if obj is None or obj["metadata"].get("uid") != self._uid:
            return True
        return (obj.get("status") or {}).get("phase") in phases.ATTEMPT_FINISHED

    async def pages(self) -> AsyncIterator[list[LogLine]]:
        """The first page, then every later one; when following, until the attempt has finished and every line
        it stored is read."""
        if self._first:
            yield self._first
        full = len(self._first) == PAGE
        options = self._options
        while True:
            finished = False
            if not full:
                if not options.follow:
                    return
                # Before the read: every line stored before the attempt finished is in this read.
                finished = await self._finished()
            lines = await self._lines.read(
                self._uid,
                after_seq=self._position,
                since_time=options.since_time,
                stream=options.stream,
                container=options.container,
                limit=PAGE,
            )
            if lines:
                self._position = lines[-1].seq
                yield lines
            full = len(lines) == PAGE
            if not full:
                if finished:
                    return
                await asyncio.sleep(POLL_SECONDS)


def _finished_job(job: Object) -> bool:
    """Whether the Job will start no more attempts: it ended, or it is being deleted."""
    status = job.get("status") or {}
    return bool(job["metadata"].get("deletionTimestamp")) or status.get("phase") in phases.JOB_FINISHED
