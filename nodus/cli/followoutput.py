"""How a followed Job is shown: on a terminal with ``rich`` (colours, a live progress bar under the scrolling
logs), elsewhere as plain lines (no colour, no bar, no escape sequences: a file or a pipe gets text).

Both say the same things in the same words; only the terminal gets colour and the bar. Log lines are the
program's own text: on a terminal their control characters are replaced (a program must not be able to
move the cursor or retitle the user's terminal through ``nodus run``); in plain mode they pass as written,
as ``kubectl logs`` passes them.

:func:`summary` is the end of every follow: the outcome (with the reason, message and fix of a failure),
the final cost and the outputs with the command that downloads each, and the exit code.
"""

from __future__ import annotations

import abc
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import IO, Any

from nodus.apimachinery.money import amount_cell

PLAIN_PROGRESS_SECONDS = 5.0
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PHASE_STYLES = {"Succeeded": "bold green", "Failed": "bold red", "Cancelled": "bold red", "Running": "bold cyan"}
_EVENT_STYLES = {"checkpoint": "blue", "lost": "yellow", "recovery": "green", "failed": "red", "note": "dim"}


@dataclass(frozen=True)
class Snapshot:
    """The Job's progress as last reported: units (either may be unknown), a measured rate, the metrics."""

    completed: int | None
    total: int | None
    per_second: float | None
    metrics: dict[str, str] = field(default_factory=dict)

    def eta_seconds(self) -> float | None:
        if self.per_second and self.total is not None and self.completed is not None:
            return max(self.total - self.completed, 0) / self.per_second
        return None

    def text(self) -> str:
        """One line: ``40/100 (40%)  2.00/s  ETA 30s  loss=0.12``."""
        parts: list[str] = []
        if self.completed is not None:
            if self.total:
                parts.append(f"{self.completed}/{self.total} ({100 * self.completed // self.total}%)")
            else:
                parts.append(f"{self.completed} done")
        parts += self.rate_parts()
        if self.metrics:
            parts.append(metrics_text(self.metrics))
        return "  ".join(parts)

    def rate_parts(self) -> list[str]:
        parts = [f"{self.per_second:.3g}/s"] if self.per_second else []
        eta = self.eta_seconds()
        if eta is not None:
            parts.append(f"ETA {duration_text(eta)}")
        return parts


class Output(abc.ABC):
    """Where a follow reports (see :class:`PlainOutput` and :class:`RichOutput`)."""

    def phase(self, job: str, phase: str, detail: str) -> None:
        self.line(f"job/{job} {phase}" + (f": {detail}" if detail else ""), _PHASE_STYLES.get(phase, "yellow"))

    def event(self, kind: str, text: str) -> None:
        self.line(f"* {text}", _EVENT_STYLES.get(kind, ""))

    @abc.abstractmethod
    def log(self, prefix: str, line: str) -> None: ...

    @abc.abstractmethod
    def line(self, text: str, style: str = "") -> None: ...

    @abc.abstractmethod
    def progress(self, snapshot: Snapshot) -> None: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Stop any live display (idempotent); what was printed stays."""


class PlainOutput(Output):
    """Plain lines on ``stream``; progress as a line when it moved, at most every few seconds (and always
    when all units are done)."""

    def __init__(self, stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stdout
        self.clock = clock
        self._printed: tuple[int | None, int | None] | None = None
        self._metrics: dict[str, str] = {}
        self._at = float("-inf")

    def log(self, prefix: str, line: str) -> None:
        self.stream.write(f"{prefix}{line}\n")
        self.stream.flush()

    def line(self, text: str, style: str = "") -> None:
        self.log("", text)

    def close(self) -> None:
        self.stream.flush()

    def progress(self, snapshot: Snapshot) -> None:
        units = (snapshot.completed, snapshot.total)
        if units == self._printed and snapshot.metrics == self._metrics:
            return
        done = snapshot.total is not None and snapshot.completed == snapshot.total
        if not done and self.clock() - self._at < PLAIN_PROGRESS_SECONDS:
            return
        self._printed, self._metrics, self._at = units, dict(snapshot.metrics), self.clock()
        self.line(f"progress {snapshot.text()}")


class RichOutput(Output):
    """A terminal: coloured lines scrolling above a live progress bar (shown once there is progress)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(highlight=False)
        self._bar: Any = None
        self._task: Any = None

    def log(self, prefix: str, line: str) -> None:
        from rich.text import Text

        self.console.print(Text(prefix + _CONTROL.sub("?", line.replace("\t", "    "))), soft_wrap=True)

    def line(self, text: str, style: str = "") -> None:
        from rich.text import Text

        self.console.print(Text(_CONTROL.sub("?", text), style=style), soft_wrap=True)

    def progress(self, snapshot: Snapshot) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        if self._bar is None:
            self._bar = Progress(
                TextColumn("[bold]progress"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[metrics]}", markup=False),
                console=self.console,
            )
            self._bar.start()
            self._task = self._bar.add_task("progress", total=None, rate="", metrics="")
        self._bar.update(
            self._task,
            completed=snapshot.completed or 0,
            total=snapshot.total,
            rate="  ".join(snapshot.rate_parts()),
            metrics=_CONTROL.sub("?", metrics_text(snapshot.metrics)),
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def output_for(stream: IO[str] | None = None) -> Output:
    """Rich on a terminal, plain lines otherwise (``NO_COLOR`` is honoured by rich itself)."""
    target = stream or sys.stdout
    return RichOutput() if target.isatty() else PlainOutput(target)


def summary(job: dict[str, Any], project: str) -> tuple[list[tuple[str, str]], int]:
    """The end of a follow as (text, style) lines, and the exit code: 0 when the Job Succeeded, else 1."""
    from nodus.apis.v1 import objects

    view = objects.read(objects.Job, job)
    name, status = view.metadata.name, view.status
    phase = str(status.phase)
    took = _took(status.start_time, status.completion_time)
    lines: list[tuple[str, str]] = []
    head = f"job/{name} {phase}" + (f" in {took}" if took else "")
    completions = view.spec.completions
    if phase == "Succeeded":
        lines.append((f"{head} ({status.succeeded or 0}/{completions} completed)", "bold green"))
    else:
        reason = status.reason if status.reason != phase else None  # "Cancelled: Cancelled: ..." says it twice
        why = ": ".join(part for part in (reason, status.message) if part)
        lines.append((head + (f": {why}" if why else ""), "bold red"))
        if status.fix:
            lines.append((f"  fix: {status.fix}", "red"))
    cost = status.cost
    if cost is not None and cost.total_usd is not None:
        exact = str(cost.total_usd)
        shown = amount_cell(exact)
        note = "" if cost.final else " (so far: the final charge is still posting; nodus describe shows it)"
        lines.append((f"cost: {shown} USD" + (f" ({exact} exactly)" if _differs(shown, exact) else "") + note, ""))
    outputs = [o for o in status.outputs or [] if o.name]
    if outputs:
        lines.append(("outputs:", "bold"))
        for output in outputs:
            rank = f" rank {output.rank}" if output.rank is not None else ""
            digest = f"sha256:{output.sha256}" if output.sha256 else "-"
            lines.append((f"  {output.name}  index {output.index or 0}{rank}  {size_text(output.size)}  {digest}", ""))
            rank_flag = f" --rank {output.rank}" if output.rank is not None else ""
            command = f"nodus outputs get {name} {output.name} --index {output.index or 0}{rank_flag} -n {project}"
            lines.append((f"    download: {command}", "dim"))
    return lines, 0 if phase == "Succeeded" else 1


def metrics_text(metrics: dict[str, str]) -> str:
    return " ".join(f"{key}={value}" for key, value in sorted(metrics.items()))


def duration_text(seconds: float) -> str:
    whole = int(seconds + 0.5)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _took(start: str | None, end: str | None) -> str:
    from nodus.apimachinery.units import parse_time

    if not start or not end:
        return ""
    try:
        return duration_text((parse_time(end) - parse_time(start)).total_seconds())
    except ValueError:
        return ""


def _differs(shown: str, exact: str) -> bool:
    try:
        return Decimal(shown.replace(",", "")) != Decimal(exact)
    except (InvalidOperation, ValueError):
        return True


def size_text(size: int | None) -> str:
    if size is None:
        return "-"
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{int(amount)} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"
