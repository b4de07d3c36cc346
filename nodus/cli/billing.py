"""``nodus credits`` (through the API) and ``nodus billing`` (an operator's tools on the database).

* ``nodus credits grant PROJECT AMOUNT [--memo TEXT] [--key KEY]``: an administrator grants credit;
  ``--key`` makes a retry safe (the same key grants once). ``nodus credits show PROJECT``.
* ``nodus billing verify``: checks every invariant of the ledger (entries sum to zero, balances equal
  their entries, no negative project balance, holds settled once and adding up, held credit equal to
  open holds) and that every display copy (Project ``status.credits``) equals the ledger; prints each
  breach and exits 1 on any.
* ``nodus billing statement PROJECT [--from T] [--to T] [--csv]``: every movement and charge of a
  project in a period, as a table or CSV, streamed from the database.

The ``billing`` commands read PostgreSQL directly (``--database-url`` or ``NODUS_DATABASE_URL``), like
``nodus migrate``: they are for whoever runs Nodus, not for its users.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import sys
from datetime import UTC, datetime
from typing import Any

from nodus.cli.processes import kubeconfig_path


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
    shown = _credits(args, "POST", body)
    print(f"granted {args.amount} USD to {args.project}: available {shown['availableUSD']}, held {shown['heldUSD']}")


def credits_show(args: argparse.Namespace) -> None:
    shown = _credits(args, "GET", None)
    print(f"{args.project}: balance {shown['balanceUSD']}, held {shown['heldUSD']}, available {shown['availableUSD']}")


def _credits(args: argparse.Namespace, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> dict[str, Any]:
        async with Client(config, user_agent="nodus-cli") as client:
            path = f"/apis/nodus.dev/v1/projects/{args.project}/credits"
            response = await client.request(method, path, json=body) if body else await client.request(method, path)
            return dict(response.json())

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
        parser.add_argument("--database-url", help="PostgreSQL URL (default: $NODUS_DATABASE_URL)")


def _time(text: str) -> datetime:
    from nodus.apimachinery import units

    try:
        return units.parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC3339 time such as 2026-11-01T00:00:00Z") from None


def _url(args: argparse.Namespace) -> str:
    url = args.database_url or os.environ.get("NODUS_DATABASE_URL")
    if not url:
        raise SystemExit("nodus billing needs --database-url or NODUS_DATABASE_URL")
    return str(url)


def verify(args: argparse.Namespace) -> None:
    from nodus.billing import checking

    found = asyncio.run(checking.verify(_url(args)))
    for breach in found:
        print(f"BREACH {breach.invariant}: {breach.detail}")
    if found:
        raise SystemExit(f"nodus billing verify: {len(found)} breaches")
    print("the ledger is sound: every invariant holds and every display copy equals it")


def statement(args: argparse.Namespace) -> None:
    from nodus.billing import checking, money

    start = args.start or datetime(1970, 1, 1, tzinfo=UTC)
    end = args.end or datetime.now(UTC)
    columns = ["time", "kind", "subject", "segment", "seconds", "rateUSDPerHour", "amountUSD", "covered", "key", "memo"]

    async def main() -> None:
        writer = csv.writer(sys.stdout) if args.csv else None
        if writer is not None:
            writer.writerow(columns)
        else:
            print(f"{'time':<27} {'kind':<8} {'segment':<9} {'seconds':>10} {'rate/h':>10} {'amount':>14}  subject")
        async for line in checking.statement(_url(args), args.project, start, end):
            # Fixed point: a normalized 3600 or 60 would print as 3.6E+3 or 6E+1.
            seconds = "" if line.seconds is None else format(line.seconds.normalize(), "f")
            rate = "" if line.rate_per_hour is None else money.text(line.rate_per_hour)
            amount = money.text(line.amount) if line.amount >= 0 else "-" + money.text(-line.amount)
            if writer is not None:
                row = [line.time.isoformat(), line.kind, line.subject, line.segment, seconds, rate, amount]
                writer.writerow([*row, str(line.covered).lower(), line.key, line.memo])
            else:
                when = line.time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                segment = line.segment + ("*" if line.covered else "")
                print(f"{when:<27} {line.kind:<8} {segment:<9} {seconds:>10} {rate:>10} {amount:>14}  {line.subject}")

    asyncio.run(main())
