"""Progress reports from the program: a JSON-lines file the agent tails, throttled into Job status.

The protocol, as the program sees it. Append lines to ``/nodus/progress`` (the path is in
``NODUS_PROGRESS_FILE``), one JSON object per line, UTF-8, ``\\n``-terminated, each with any subset of::

    {"stage": "train", "completed": 120, "total": 1000, "metrics": {"loss": 0.25, "lr": "3e-4"}}

* ``completed``: units of work done so far, cumulative over the whole attempt (not per stage). An
  integer (an integral float such as ``120.0`` is accepted) from 0 to 2**31-1. It only moves forward:
  a value lower than the highest seen is ignored, so a restarted loop cannot move progress back.
* ``total``: units planned, when known; a later value replaces it (re-planning), ``null`` clears it.
* ``stage``: a free-form name of what the program is doing (``"download"``, ``"train"``), 1 to 128
  characters; the latest wins.
* ``metrics``: an object of latest scalar values, merged into the ones already reported. A name matches
  ``^[A-Za-z_][A-Za-z0-9_./-]{0,63}$``; a value is a finite number or a string holding one
  (``"3e-4"``, at most 64 characters), reported as a decimal string (``0.25`` -> ``"0.25"``);
  ``null`` removes the metric. At most :data:`MAX_METRICS` names are kept: new names past that are
  dropped.
* ``cursor``: where a restarted program should pick up (``spec.recovery.continuity: Restartable``), a
  string of 1 to 4096 printable characters (an offset, a file name, a JSON text); the latest wins. It is
  reported as the Attempt's ``status.resumeCursor`` and a replacement attempt gets it in
  ``NODUS_RESUME_CURSOR``. Report it once the work before it is durable (written to an output, a bucket).
* Other keys are ignored (room for later versions). A field with an invalid value is ignored and the
  rest of the line applies. A line that is not a JSON object, is not UTF-8, or is longer than 64 KiB
  is ignored as a whole. Ignored lines and values are counted (:attr:`ProgressTracker.ignored_lines`,
  :attr:`ProgressTracker.ignored_values`), never fatal: progress is advisory.
* The file may be truncated or replaced (rename a new file over it); reading starts again at its
  beginning. A truncation immediately followed by more bytes than were there before goes unnoticed.

Unit times. Between two moments at which ``completed`` rose, the time passed divided by the units
added is one sample of the time per unit; rises seen at the same moment (one read of the file) count
as one rise to the highest value. The first report only sets the starting point, so start-up time
does not count. The last :data:`RESERVOIR` samples give ``p50Ms`` and ``p95Ms`` (nearest rank,
rounded to whole milliseconds). The watcher timestamps lines when it reads them, so for a program
that reports faster than the poll interval a sample is the average over one interval.

:class:`ProgressFileWatcher` tails the file and calls ``report(snapshot)`` at most once per
``min_interval`` and only with a changed snapshot, so a chatty program costs the API server at most
one status write per interval; ``close()`` reads the rest and reports the final state. The file is opened
without following a link and only if it is a regular file (``nodus.agent.hostfiles``, ADR 0031): a program
that replaces it with a link to a host file, or a fifo, gets nothing read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import orjson

from nodus.agent import hostfiles

log = logging.getLogger("nodus.agent.progress")

PROGRESS_FILE_ENV = "NODUS_PROGRESS_FILE"
SANDBOX_PROGRESS_FILE = "/nodus/progress"
MAX_LINE = 64 * 1024
MAX_METRICS = 64
MAX_STAGE = 128
MAX_CURSOR = 4096
MAX_UNITS = 2**31 - 1
RESERVOIR = 2048
CHUNK = 1 << 20
READ_PER_POLL = 16 * CHUNK
"""A poll reads at most this much, so a program writing without pause cannot starve the reports."""
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,4})?$")

Snapshot = dict[str, Any]
Report = Callable[[Snapshot], Awaitable[None]]


class ProgressTracker:
    """The state built from progress lines; pure (no I/O), the clock passed in by the caller."""

    def __init__(self, reservoir: int = RESERVOIR) -> None:
        self.stage: str | None = None
        self.completed: int | None = None
        self.total: int | None = None
        self.metrics: dict[str, str] = {}
        self.cursor: str | None = None
        self.ignored_lines = 0
        self.ignored_values = 0
        # (time, completed) where the last sample ended, and the latest rise not yet sampled.
        self._anchor: tuple[float, int] | None = None
        self._pending: tuple[float, int] | None = None
        self._unit_ms: deque[float] = deque(maxlen=reservoir)

    def feed(self, line: str, now: float) -> None:
        """Apply one line (without or with its ``\\n``) read at ``now`` (seconds, any monotonic origin)."""
        if len(line) > MAX_LINE or (len(line) > MAX_LINE // 4 and len(line.encode("utf-8", "replace")) > MAX_LINE):
            self.ignore_line()
            return
        try:
            report = orjson.loads(line)
        except orjson.JSONDecodeError:
            report = None
        if not isinstance(report, dict):
            self.ignore_line()
            return
        if "stage" in report:
            self._stage(report["stage"])
        if "total" in report:
            self._total(report["total"])
        if "completed" in report:
            self._completed(report["completed"], now)
        if "metrics" in report:
            self._metrics(report["metrics"])
        if "cursor" in report:
            self._cursor(report["cursor"])

    def ignore_line(self) -> None:
        """Count a line that could not be read at all (the watcher calls it for lines that are not UTF-8)."""
        self.ignored_lines += 1

    def snapshot(self) -> Snapshot:
        """A new dict shaped like the Job status fields ``progress`` and ``unitMetrics``; unknown parts omitted."""
        units = {k: v for k, v in (("completed", self.completed), ("total", self.total)) if v is not None}
        progress: Snapshot = {}
        if self.stage is not None:
            progress["stage"] = self.stage
        if units:
            progress["units"] = units
        if self.metrics:
            progress["metrics"] = dict(self.metrics)
        snapshot: Snapshot = {"progress": progress} if progress else {}
        if self.cursor is not None:
            snapshot["resumeCursor"] = self.cursor
        if self.completed is not None:
            unit_metrics: Snapshot = {"completed": self.completed}
            samples = list(self._unit_ms)
            if self._pending is not None and (latest := self._sample(self._pending)) is not None:
                samples.append(latest)
            if samples:
                ordered = sorted(samples)
                unit_metrics["p50Ms"] = _rank(ordered, 0.50)
                unit_metrics["p95Ms"] = _rank(ordered, 0.95)
            snapshot["unitMetrics"] = unit_metrics
        return snapshot

    def _stage(self, value: Any) -> None:
        if isinstance(value, str) and 0 < len(value) <= MAX_STAGE and value.isprintable():
            self.stage = value
        else:
            self.ignored_values += 1

    def _cursor(self, value: Any) -> None:
        if isinstance(value, str) and 0 < len(value) <= MAX_CURSOR and value.isprintable():
            self.cursor = value
        else:
            self.ignored_values += 1

    def _total(self, value: Any) -> None:
        if value is None:
            self.total = None
        elif (units := _units(value)) is not None:
            self.total = units
        else:
            self.ignored_values += 1

    def _completed(self, value: Any, now: float) -> None:
        units = _units(value)
        if units is None:
            self.ignored_values += 1
            return
        if self.completed is not None and units <= self.completed:
            return
        self.completed = units
        if self._anchor is None:
            self._anchor = (now, units)
            return
        if self._pending is not None and now > self._pending[0]:
            sample = self._sample(self._pending)
            if sample is not None:
                self._unit_ms.append(sample)
            self._anchor = self._pending
        # Rises read at the same moment (one read of the file) fold into one sample, taken at the next moment.
        self._pending = (now, units)

    def _sample(self, point: tuple[float, int]) -> float | None:
        """Milliseconds per unit from the anchor to ``point``, or None when no time passed between them."""
        assert self._anchor is not None
        (since, before), (until, after) = self._anchor, point
        return (until - since) * 1000 / (after - before) if until > since and after > before else None

    def _metrics(self, value: Any) -> None:
        if not isinstance(value, dict):
            self.ignored_values += 1
            return
        for name, raw in value.items():
            if not METRIC_NAME.match(name):
                self.ignored_values += 1
            elif raw is None:
                self.metrics.pop(name, None)
            elif (text := _decimal(raw)) is None or (name not in self.metrics and len(self.metrics) >= MAX_METRICS):
                self.ignored_values += 1
            else:
                self.metrics[name] = text


def _units(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value <= MAX_UNITS else None


def _decimal(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if abs(value) < 10**30 else None
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= 64 and _NUMBER.match(value):
        return value
    return None


def _rank(ordered: list[float], quantile: float) -> int:
    return round(ordered[max(0, math.ceil(quantile * len(ordered)) - 1)])


class ProgressFileWatcher:
    """Tails the host path of an attempt's progress file and reports throttled snapshots.

    ``report`` is awaited with a fresh snapshot at most once per ``min_interval`` seconds of ``clock``
    and only when it differs from the last one reported; an exception from it is logged and the same
    state is offered again after the interval. Use :meth:`start` for a background task polling every
    ``poll_interval``, or call :meth:`poll` yourself (tests, a fake clock); end with :meth:`close`.
    """

    def __init__(
        self,
        path: Path,
        report: Report,
        *,
        min_interval: float = 5.0,
        poll_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.tracker = ProgressTracker()
        self._report, self._min_interval, self._poll_interval, self._clock = report, min_interval, poll_interval, clock
        self._file: IO[bytes] | None = None
        self._identity: tuple[int, int] | None = None
        self._partial = bytearray()
        self._discarding = False  # inside a line already longer than MAX_LINE
        self._reported: Snapshot | None = None
        self._reported_at = -math.inf
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Poll in a background task until :meth:`close`."""
        self._task = asyncio.create_task(self._run(), name=f"progress {self.path}")

    async def poll(self) -> None:
        """Read what the program appended since the last poll, then report if a report is due."""
        await asyncio.to_thread(self._read)
        if self._clock() - self._reported_at >= self._min_interval:
            await self._flush()

    async def close(self) -> None:
        """Stop polling, read the rest of the file and report the final state if it changed (not throttled)."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        await asyncio.to_thread(self._read)
        if self._partial and not self._discarding:  # the program has ended: a last unterminated line counts
            self._feed(bytes(self._partial), self._clock())
            self._partial.clear()
        await self._flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.poll()
            except Exception:
                log.exception("reading progress from %s failed", self.path)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval):
                    await self._stopping.wait()

    async def _flush(self) -> None:
        snapshot = self.tracker.snapshot()
        if snapshot == self._reported:
            return
        self._reported_at = self._clock()
        try:
            await self._report(snapshot)
        except Exception:
            log.exception("reporting progress from %s failed", self.path)
            return
        self._reported = snapshot

    def _read(self) -> None:
        """Blocking: follow rotation and truncation, then feed every complete new line."""
        fd = self._open()
        if fd is not None:
            status = os.fstat(fd)
            if (status.st_dev, status.st_ino) == self._identity:
                os.close(fd)
            else:
                if self._file is not None:
                    self._drain(self._file)  # the rest of the replaced file, then the new one
                    self._file.close()
                self._file, self._identity = os.fdopen(fd, "rb"), (status.st_dev, status.st_ino)
                self._partial.clear()
                self._discarding = False
        if self._file is None:
            return
        if os.fstat(self._file.fileno()).st_size < self._file.tell():
            self._file.seek(0)
            self._partial.clear()
            self._discarding = False
        self._drain(self._file)

    def _open(self) -> int | None:
        """The file at :attr:`path` if it is a regular file, opened without following a link; else None."""
        try:
            return hostfiles.open_file(hostfiles.location(self.path))
        except FileNotFoundError:
            return None
        except hostfiles.UnsafePath as exc:
            log.warning("progress file not read: %s", exc)
            return None

    def _drain(self, file: IO[bytes]) -> None:
        now, budget = self._clock(), READ_PER_POLL
        while budget > 0 and (chunk := file.read(min(CHUNK, budget))):
            budget -= len(chunk)
            lines = chunk.split(b"\n")
            for index, piece in enumerate(lines):
                last = index == len(lines) - 1
                if self._discarding:
                    self._discarding = last
                    continue
                if len(self._partial) + len(piece) > MAX_LINE:
                    self._partial.clear()
                    self.tracker.ignore_line()
                    self._discarding = last
                    continue
                self._partial += piece
                if not last:
                    self._feed(bytes(self._partial), now)
                    self._partial.clear()

    def _feed(self, raw: bytes, now: float) -> None:
        if not raw.strip():
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.tracker.ignore_line()
            return
        self.tracker.feed(line, now)
