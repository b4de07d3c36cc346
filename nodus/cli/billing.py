"""``nodus credits`` (a project's credit) and ``nodus billing`` (the ledger, for administrators and operators).

* ``nodus credits grant PROJECT AMOUNT [--memo TEXT] [--key KEY]``: an administrator grants credit;
  ``--key`` makes a retry safe (the same key grants once, and a retry says it was granted already).
  ``nodus credits show PROJECT``.
* ``nodus billing verify``: checks every invariant of the ledger (entries sum to zero, balances equal
  their entries, no negative project balance, holds settled once and adding up, held credit equal to
  open holds) and that every display copy (Project ``status.credits``) equals the ledger; prints each
  breach and exits 1 on any.
* ``nodus billing statement PROJECT [--from T] [--to T] [--csv]``: every movement and charge of a
  project in a period, each naming what it paid for (``attempt/NAME``, ``job/NAME``, ``project/NAME``),
  as a table or CSV, streamed.

The ``billing`` commands ask the API server with an administrator's kubeconfig (``--kubeconfig`` or
``KUBECONFIG``: the one ``nodus dev`` writes), or, for whoever runs Nodus, read PostgreSQL directly
(``--database-url`` or ``NODUS_DATABASE_URL``, which win when given), like ``nodus migrate``. Both print the
same: tables round money for the eye (amounts to the cent, rates to four decimals:
:mod:`nodus.apimachinery.money`), CSV carries the exact amounts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodus.apimachinery.money import amount_cell, rate_cell
from nodus.cli.processes import kubeconfig_path

if TYPE_CHECKING:
    from nodus.client import Client

# How the CLI's tables name a segment whose API name says less than it is (the API keeps its names: renaming
# one would be a new API version). ``Teardown`` is the billed time rounded up to the billing increment.
SEGMENT_NAMES = {"Teardown": "Rounding"}
# Verification reads every ledger table: on a large ledger it takes longer than a request usually may.
VERIFY_TIMEOUT_SECONDS = 600.0


def add_credits_flags(grant: argparse.ArgumentParser, show: argparse.ArgumentParser) -> None:
    grant.add_argument("project")
    grant.add_argument("amount", help="decimal USD, e.g. 100 or 12.50")
    grant.add_argument("--memo", default="", help="why (kept in the ledger and statements)")
    grant.add_argument("--key", help="an idempotency key: the same key grants once, however often it is sent")
    show.add_argument("project")
    for parser in (grant, show):
        parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def credits_grant(args: argparse.Namespace) -> None:
    body: dict[str, Any] = {"amountUSD": args.amount, "memo": args.memo}
    if args.key:
        body["key"] = args.key
    status, shown = _credits(args, "POST", body)
    granted = shown.get("grant") or {}
    amount = amount_cell(str(granted.get("amountUSD", args.amount)))
    now = f"available {amount_cell(shown['availableUSD'])}, held {amount_cell(shown['heldUSD'])}"
    if granted.get("replayed", status == 200):
        # The ledger granted this key once; a retry (or a second run of a script) must not read as a second grant.
        key = granted.get("key", args.key)
        print(f"already granted: key {key} granted {amount} USD to {args.project} before; nothing more now: {now}")
    else:
        print(f"granted {amount} USD to {args.project}: {now}")


def credits_show(args: argparse.Namespace) -> None:
    _, shown = _credits(args, "GET", None)
    print(
        f"{args.project}: balance {amount_cell(shown['balanceUSD'])}, held {amount_cell(shown['heldUSD'])}, "
        f"available {amount_cell(shown['availableUSD'])}"
    )


def _credits(args: argparse.Namespace, method: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> tuple[int, dict[str, Any]]:
        async with Client(config, user_agent="nodus-cli") as client:
            path = f"/apis/nodus.dev/v1/projects/{args.project}/credits"
            response = await client.request(method, path, json=body) if body else await client.request(method, path)
            return response.status_code, dict(response.json())

    try:
        return asyncio.run(main())
    except errors.APIError as exc:
        raise SystemExit(f"nodus credits: {exc}") from None


def add_billing_flags(verify: argparse.ArgumentParser, statement: argparse.ArgumentParser) -> None:
    statement.add_argument("project")
    statement.add_argument("--from", dest="start", type=_time, help="RFC3339 (default: the beginning)")
    statement.add_argument("--to", dest="end", type=_time, help="RFC3339, exclusive (default: now)")
    statement.add_argument("--csv", action="store_true", help="CSV on standard output instead of a table")
    for parser in (verify, statement):
        parser.add_argument("--kubeconfig", help="an administrator's kubeconfig (default: $KUBECONFIG)")
        parser.add_argument(
            "--database-url", help="read PostgreSQL directly instead (operators; default: $NODUS_DATABASE_URL)"
        )


def _time(text: str) -> datetime:
    from nodus.apimachinery import units

    try:
        return units.parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC3339 time such as 2026-11-01T00:00:00Z") from None


def _database_url(args: argparse.Namespace) -> str | None:
    """The database to read directly, when the operator named one; None: ask the API server."""
    url = args.database_url or os.environ.get("NODUS_DATABASE_URL")
    if url:
        return str(url)
    if not (args.kubeconfig or os.environ.get("KUBECONFIG")):
        raise SystemExit(
            "nodus billing needs an administrator's kubeconfig (--kubeconfig or $KUBECONFIG; nodus dev writes "
            "DATA_DIR/kubeconfig), or, for operators, --database-url or $NODUS_DATABASE_URL"
        )
    return None


def verify(args: argparse.Namespace) -> None:
    url = _database_url(args)
    if url is not None:
        from nodus.billing import checking

        found = [(breach.invariant, breach.detail) for breach in asyncio.run(checking.verify(url))]
    else:
        answer = _through_api(args, _verification)
        found = [(str(b["invariant"]), str(b["message"])) for b in answer.get("breaches") or []]
    for invariant, detail in found:
        print(f"BREACH {invariant}: {detail}")
    if found:
        raise SystemExit(f"nodus billing verify: {len(found)} breaches")
    print("the ledger is sound: every invariant holds and every display copy equals it")


async def _verification(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    response = await client.request("GET", "/apis/nodus.dev/v1/ledger/verify", timeout=VERIFY_TIMEOUT_SECONDS)
    return dict(response.json())


COLUMNS = [
    "time",
    "kind",
    "subject",
    "subjectName",
    "segment",
    "seconds",
    "rateUSDPerHour",
    "amountUSD",
    "covered",
    "key",
    "memo",
]


def statement(args: argparse.Namespace) -> None:
    start = args.start or datetime(1970, 1, 1, tzinfo=UTC)
    end = args.end or datetime.now(UTC)
    url = _database_url(args)

    async def print_lines(lines: AsyncIterator[dict[str, Any]]) -> None:
        writer = csv.writer(sys.stdout) if args.csv else None
        if writer is not None:
            writer.writerow(COLUMNS)
        else:
            print(f"{'time':<27} {'kind':<8} {'segment':<9} {'seconds':>10} {'rate/h':>10} {'amount':>12}  for")
        notes: set[str] = set()
        async for line in lines:
            if writer is not None:
                row = {**line, "kind": line["movement"], "covered": str(line["covered"]).lower()}
                writer.writerow([row.get(column, "") for column in COLUMNS])
            else:
                print(_row(line, notes))
        if writer is None:
            for note in sorted(notes):
                print(note)

    if url is not None:
        from nodus.billing import checking

        async def from_database() -> None:
            await print_lines(checking.wire(line) async for line in checking.statement(url, args.project, start, end))

        asyncio.run(from_database())
    else:

        async def from_api(client: Client, args: argparse.Namespace) -> None:
            await print_lines(_statement_lines(client, args.project, start, end))

        _through_api(args, from_api)


_ROUNDING_NOTE = (
    "Rounding: the billed time rounded up to the billing increment (60 s, at least one); the API names it Teardown."
)
_COVERED_NOTE = "*: covered by Nodus (time lost to its fault), not charged to the project."


def _row(line: dict[str, Any], notes: set[str]) -> str:
    """One statement line for people: money rounded for the eye, the segment by what it is, and what it paid for
    by name (the uid only when nothing names it any more)."""
    segment = str(line.get("segment") or "")
    if segment in SEGMENT_NAMES:
        notes.add(_ROUNDING_NOTE)
        segment = SEGMENT_NAMES[segment]
    if line.get("covered"):
        notes.add(_COVERED_NOTE)
        segment += "*"
    rate = rate_cell(line["rateUSDPerHour"]) if "rateUSDPerHour" in line else ""
    memo = str(line.get("memo") or "")
    named = str(line.get("subjectName") or "") or (f"uid {line['subject']}" if line.get("subject") else "")
    # A grant pays for nothing: its memo says why, else its key names it.
    what = "  ".join(part for part in (named, memo if memo != named else "") if part) or f"key {line['key']}"
    when = str(line["time"])
    return (
        f"{when:<27} {line['movement']:<8} {segment:<9} {line.get('seconds', ''):>10} {rate:>10} "
        f"{amount_cell(line['amountUSD']):>12}  {what}"
    )


async def _statement_lines(
    client: Client, project: str, start: datetime, end: datetime
) -> AsyncIterator[dict[str, Any]]:
    """The items of the API's ``LedgerStatement`` as they stream: one per line after the head line, until the
    closing ``]}``; a stream that ends without it was cut short, and says so rather than look complete."""
    import orjson

    from nodus.apimachinery import units

    params = {"start": units.format_micro_time(start), "end": units.format_micro_time(end)}
    path = f"/apis/nodus.dev/v1/namespaces/{project}/ledger/statement"
    lines = client.stream_lines(path, params)
    count = 0
    async with contextlib.aclosing(lines):
        head = await anext(lines, "")
        if not head.endswith('"items":['):
            raise SystemExit(f"nodus billing statement: the server did not answer a LedgerStatement: {head[:200]}")
        async for text in lines:
            if text == "]}":
                return
            yield dict(orjson.loads(text.removeprefix(",")))
            count += 1
    raise SystemExit(f"nodus billing statement: the statement was cut short after {count} lines; run it again")


def _through_api(args: argparse.Namespace, call: Callable[[Client, argparse.Namespace], Awaitable[Any]]) -> Any:
    """``call(client, args)`` with a client of the kubeconfig's API server; its errors as the CLI's."""
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> Any:
        async with Client(config, user_agent="nodus-cli") as client:
            return await call(client, args)

    try:
        return asyncio.run(main())
    except errors.APIError as exc:
        fix = exc.body.get("fix") if isinstance(exc.body, dict) else None
        raise SystemExit(f"nodus billing: {exc}" + (f"\n  fix: {fix}" if fix else "")) from None
