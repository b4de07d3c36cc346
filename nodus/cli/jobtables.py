"""What ``nodus jobs`` and ``nodus describe`` print: pure functions from Jobs and Attempts (JSON, as served) to
blocks of cells, and two renderings of those blocks, one for a terminal (rich, coloured by phase) and one plain.

The blocks are data (:class:`Fields`: a titled list of key/value lines, :class:`Grid`: a titled table), so the
two renderings cannot say different things, and tests read what a person would see without a terminal.

Plain text is what a pipe or a file gets: columns aligned with spaces as ``kubectl get`` aligns them, no colour,
no box characters, no escape codes. Every text that reaches a cell passes :func:`clean` first: a Job's message
carries the last lines its program logged, which may hold terminal escapes (an OSC 52 sequence writes to the
clipboard, a CSI sequence rewrites the screen); they are shown as visible ``^[`` text, never sent to the
terminal. Rich renders cells as :class:`rich.text.Text`, so square brackets in them are text, not markup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from nodus.apimachinery.money import amount_cell
from nodus.apis.v1 import objects

if TYPE_CHECKING:
    from rich.console import RenderableType

PHASE_STYLES: dict[str, str] = {
    "Succeeded": "green",
    "Failed": "red",
    "Running": "cyan",
    "Recovering": "cyan",
    "Provisioning": "blue",
    "Starting": "blue",
    "Pending": "yellow",
    "Queued": "yellow",
    "Admitted": "yellow",
    "Suspending": "dim",
    "Suspended": "dim",
    "Cancelled": "dim",
    "Stopped": "dim",
    "Lost": "magenta",
}
"""The colour of a Job's or an Attempt's phase in a terminal (rich style names)."""

# C0 controls but newline and tab, DEL, and the C1 controls (U+0080..U+009F: 8-bit CSI and OSC).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """``text`` with every control character but newline shown as caret text (ESC as ``^[``), tabs as a space:
    what a terminal must never interpret."""
    text = text.replace("\t", " ")
    return _CONTROL.sub(lambda m: "^" + chr((ord(m[0]) + 64) % 128) if ord(m[0]) < 128 else "\ufffd", text)


@dataclass(frozen=True)
class Cell:
    """A piece of text and its terminal style (empty: none); the text is cleaned when the cell is made."""

    text: str
    style: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", clean(self.text))


@dataclass(frozen=True)
class Fields:
    """Key/value lines under a title (no title: the top of a description, not indented)."""

    title: str
    rows: tuple[tuple[str, Cell], ...]


@dataclass(frozen=True)
class Grid:
    """A table under a title (no title: a listing of its own, as ``nodus jobs`` prints)."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


Block = Fields | Grid


def phase_cell(phase: str | None) -> Cell:
    """A phase, coloured by :data:`PHASE_STYLES`; ``-`` before the first status."""
    return Cell(phase or "-", PHASE_STYLES.get(phase or "", ""))


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time as served (``...Z``), or None when absent or not a time."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(created: str | None, now: datetime) -> str:
    """How long ago ``created`` was, as ``kubectl get`` shows it (``5s``, ``3m``, ``2h``, ``4d``, ``2y``: one
    unit, rounded down); ``<unknown>`` without a time, ``<invalid>`` for one more than a second ahead of now."""
    when = parse_time(created)
    if when is None:
        return "<unknown>"
    seconds = int((now - when).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    if seconds < 365 * 86400:
        return f"{seconds // 86400}d"
    return f"{seconds // (365 * 86400)}y"


def duration(seconds: float) -> str:
    """A span in its two largest units (``45s``, ``3m12s``, ``2h5m``, ``3d4h``), rounded down to the second."""
    whole = max(int(seconds), 0)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next((i for i, (value, _) in enumerate(units) if value), len(units) - 1)
    largest, second = units[first], units[first + 1] if first + 1 < len(units) else (0, "")
    return f"{largest[0]}{largest[1]}" + (f"{second[0]}{second[1]}" if second[0] else "")


def money(value: str | Decimal | None) -> str:
    """USD to the cent with a dollar sign (``$1,234.50``; ``<$0.01`` for a few micro-dollars); ``-`` if absent."""
    return "-" if value is None or value == "" else amount_cell(value, "$")


def decimal(value: str | None) -> Decimal | None:
    """A decimal string as served, or None when absent or not a number."""
    if value is None:
        return None
    try:
        return Decimal(value)
    except InvalidOperation:
        return None


def size(value: int | None) -> str:
    """Bytes in binary units with one decimal (``512 B``, ``1.5 KiB``, ``3.0 GiB``); ``-`` if absent."""
    if value is None:
        return "-"
    amount, unit = float(value), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            break
        amount /= 1024
    return f"{value} B" if unit == "B" else f"{amount:.1f} {unit}"


def jobs_grid(items: Sequence[dict[str, Any]], now: datetime, *, all_projects: bool) -> Grid:
    """The ``nodus jobs`` table: NAME (PROJECT first with ``all_projects``), PHASE, COMPLETIONS (succeeded /
    completions), COST (``status.cost.totalUSD`` so far), AGE; newest first (then by project and name)."""
    jobs = [objects.read(objects.Job, item) for item in items]
    jobs.sort(key=lambda job: (-_created(job), job.metadata.namespace or "", job.metadata.name))
    rows: list[tuple[Cell, ...]] = []
    for job in jobs:
        status = job.status
        cost = status.cost.total_usd if status.cost else None
        row = [
            Cell(job.metadata.name),
            phase_cell(status.phase),
            Cell(f"{status.succeeded or 0}/{job.spec.completions}"),
            Cell(money(cost)),
            Cell(age(job.metadata.creation_timestamp, now)),
        ]
        rows.append((Cell(job.metadata.namespace or ""), *row) if all_projects else tuple(row))
    headers = ("NAME", "PHASE", "COMPLETIONS", "COST", "AGE")
    return Grid("", ("PROJECT", *headers) if all_projects else headers, tuple(rows))


def _created(job: objects.Job) -> float:
    when = parse_time(job.metadata.creation_timestamp)
    return when.timestamp() if when else 0.0


def plain(blocks: Iterable[Block]) -> str:
    """The blocks as plain text: ``Title:`` lines, key/value lines and space-aligned columns indented under a
    title; nothing but printable text, spaces and newlines."""
    out: list[str] = []
    for block in blocks:
        indent = "  " if block.title else ""
        if block.title:
            out.append(f"{block.title}:")
        if isinstance(block, Fields):
            width = max((len(key) for key, _ in block.rows), default=0) + 1
            for key, cell in block.rows:
                first, *more = cell.text.split("\n") or [""]
                out.append(f"{indent}{(key + ':').ljust(width)}  {first}".rstrip())
                out.extend(f"{indent}{' ' * width}  {line}".rstrip() for line in more)
        elif not block.rows:
            out.append(f"{indent}<none>")
        else:
            table = [block.headers, *((_one_line(c.text) for c in row) for row in block.rows)]
            texts = [tuple(row) for row in table]
            widths = [max(len(row[i]) for row in texts) for i in range(len(block.headers))]
            for row in texts:
                line = "   ".join(text.ljust(width) for text, width in zip(row, widths, strict=True))
                out.append(f"{indent}{line}".rstrip())
    return "\n".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split("\n"))


def rich(blocks: Iterable[Block]) -> list[RenderableType]:
    """The blocks for a terminal: bold titles, tables with bold headers and no borders (as kubectl's), phase
    cells in their colours."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    out: list[RenderableType] = []
    for block in blocks:
        if block.title:
            out.append(Text(f"{block.title}:", style="bold"))
        if isinstance(block, Fields):
            table = Table.grid(padding=(0, 2))
            table.add_column(style="bold", no_wrap=True)
            table.add_column(overflow="fold")
            for key, cell in block.rows:
                table.add_row(Text(f"{key}:"), Text(cell.text, style=cell.style))
        elif not block.rows:
            table = Table.grid()
            table.add_row(Text("<none>", style="dim"))
        else:
            table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 3, 0, 0))
            for header in block.headers:
                table.add_column(header, overflow="fold")
            for row in block.rows:
                table.add_row(*(Text(cell.text, style=cell.style) for cell in row))
        out.append(Padding(table, (0, 0, 0, 2), expand=False) if block.title else table)
    return out
