"""``nodus estimate -f job.yaml``: what a Job will cost before it runs, as a readable table.

It sends the Job as a dry run (``POST ...?dryRun=All``: nothing is stored) and prints
``status.estimate``: the cost and overhead bands, the rate and holds, the placement preview, startup
bands, warnings and blocking reasons with their fix. Where the duration per index comes from is a row of
its own: without ``spec.expectedDuration`` and without earlier runs of the program, the server assumes
an hour (warning ``NoExpectedDuration``), and the table says so next to the cost, which is then a guess.
Money is rounded for the eye as every table rounds it (amounts to the cent, rates to four decimals:
:mod:`nodus.apimachinery.money`). ``-o yaml|json`` prints the estimate as data, exact, with its ETag.
``--create`` then creates the Job bound to the estimate it printed (``If-Match``: admitted even after
``validUntil``, never placed above the rate plus 10 %); it is refused if the estimate has blocking reasons.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from nodus.apimachinery.money import amount_cell, rate_cell
from nodus.cli.processes import kubeconfig_path


def add_estimate_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", required=True, help="the Job manifest (YAML or JSON; - for stdin)")
    parser.add_argument("-n", "--namespace", "--project", dest="project", help="the project (default: kubeconfig's)")
    parser.add_argument("-o", "--output", choices=("table", "yaml", "json"), default="table")
    parser.add_argument(
        "--create", action="store_true", help="then create the Job bound to this estimate (If-Match on its ETag)"
    )
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def estimate(args: argparse.Namespace) -> None:
    from nodus.client import Client, ClientConfig, errors

    text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
    job = yaml.safe_load(text)
    if not isinstance(job, dict) or job.get("kind") not in (None, "Job"):
        raise SystemExit(f"{args.filename}: expected one Job manifest")
    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    project = str(args.project or (job.get("metadata") or {}).get("namespace") or config.namespace or "default")
    path = f"/apis/nodus.dev/v1/namespaces/{project}/jobs"

    async def main() -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
        async with Client(config, user_agent="nodus-cli") as client:
            try:
                answered = await client.request("POST", path, params={"dryRun": "All"}, json=job)
                etag = answered.headers.get("etag")
                created = None
                if args.create:
                    headers = {"If-Match": etag} if etag else {}
                    created = (await client.request("POST", path, json=job, headers=headers)).json()
                return answered.json(), etag, created
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    answered, etag, created = asyncio.run(main())
    figures = (answered.get("status") or {}).get("estimate") or {}
    name = (answered.get("metadata") or {}).get("name") or "(generated)"
    if args.output == "json":
        print(json.dumps({"job": name, "project": project, "etag": etag, "estimate": figures}, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump({"job": name, "project": project, "etag": etag, "estimate": figures}, sort_keys=False))
    else:
        expected = (job.get("spec") or {}).get("expectedDuration")
        print(render(name, project, figures, str(expected) if expected else None))
    if created is not None:
        print(f"job/{created['metadata']['name']} created, bound to this estimate", file=sys.stderr)


def render(name: str, project: str, estimate: dict[str, Any], expected: str | None = None) -> str:
    """The estimate as a table for people (every field; the placement explanation last); ``expected`` is the
    Job's ``spec.expectedDuration``, if it has one."""
    rows: list[tuple[str, str]] = [("Job", f"{project}/{name}")]

    def band(key: str, note: str = "") -> str:
        value = estimate.get(key) or {}
        p50, p90 = (amount_cell(str(value[p])) if p in value else "-" for p in ("p50", "p90"))
        return f"{p50} (P50)  {p90} (P90){note}"

    def amount(key: str) -> str:
        return amount_cell(str(estimate[key])) if key in estimate else "-"

    if "costUSD" in estimate:
        duration, guessed = _duration(estimate, expected)
        rows += [
            ("Duration", duration),
            ("Cost USD", band("costUSD", "  A GUESS: see Duration" if guessed else "")),
            ("Overhead USD", band("overheadUSD")),
            ("Rate USD/h", rate_cell(str(estimate["rateUSDPerHour"])) if "rateUSDPerHour" in estimate else "-"),
            ("First hold USD", amount("holdUSD")),
            ("Concurrent hold USD", amount("concurrentHoldUSD")),
            ("Minimum charge USD", amount("minimumChargeUSD")),
        ]
        for key, label in (("gangHoldUSD", "Gang hold USD"), ("assemblyBoundUSD", "Assembly bound USD")):
            if key in estimate:
                rows.append((label, amount(key)))
        if "topology" in estimate:
            rows.append(("Topology", str(estimate["topology"])))
    preview = estimate.get("placementPreview") or {}
    if preview.get("pool"):
        fee = preview.get("platformFee") or {}
        host = f"host {preview['node']}" if preview.get("node") else "no host free now"
        rows.append(("Placement", f"pool {preview['pool']} ({host})"))
        per_gpu, per_host = fee.get("perGPUHour"), fee.get("perHostHour")
        rows.append(("Platform fee", f"{per_gpu} USD per GPU-hour, {per_host} per host-hour"))
    elif preview:
        kind = "interruptible" if preview.get("interruptible") else "on-demand"
        start = "warm (reuses an idle host)" if preview.get("warmReuse") else "cold"
        rows.append(("Placement", f"{preview.get('offering')} ({preview.get('regionClass')}, {kind}, {start})"))
    for kind in ("cold", "warm"):
        startup = (estimate.get("startup") or {}).get(kind)
        if startup:
            rows.append((f"Startup {kind}", f"{startup['p50']} (P50)  {startup['p90']} (P90)"))
    rows += [("Price book", str(estimate.get("pricebookVersion"))), ("Valid until", str(estimate.get("validUntil")))]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    for reason in estimate.get("blockingReasons") or []:
        lines += [f"BLOCKED {reason['code']}: {reason['message']}", f"  fix: {reason['fix']}"]
    for warning in estimate.get("warnings") or []:
        lines.append(f"warning {warning['code']}: {warning['message']}")
    if preview.get("explain"):
        lines += ["", "Placement explained:", *("  " + line for line in str(preview["explain"]).splitlines())]
    return "\n".join(lines)


# The figures the server's duration warnings carry (nodus/billing/estimating.py); the row still says where the
# duration came from if their wording changes, only without the figures.
_ASSUMED = re.compile(r"assumes (\S+) \(P90 (\S+?)\)")
_FROM_HISTORY = re.compile(r"from (\d+) earlier run\(s\).*\(P50 (\S+), P90 (\S+?)\)")


def _duration(estimate: dict[str, Any], expected: str | None) -> tuple[str, bool]:
    """Where the duration per index comes from, as the Duration row says it, and whether it is a guess;
    ``expected`` is the manifest's ``spec.expectedDuration``."""
    warnings = {str(w.get("code")): str(w.get("message") or "") for w in estimate.get("warnings") or []}
    if "NoExpectedDuration" in warnings:
        found = _ASSUMED.search(warnings["NoExpectedDuration"])
        assumed = f"{found[1]} per index (P90 {found[2]})" if found else "assumed"
        return f"A GUESS: {assumed}: no spec.expectedDuration, no earlier run of this program", True
    if "DurationFromHistory" in warnings:
        found = _FROM_HISTORY.search(warnings["DurationFromHistory"])
        if found:
            return f"{found[2]} (P50)  {found[3]} (P90) per index, from {found[1]} earlier run(s)", False
        return "from earlier runs of this program", False
    return f"{expected} per index, from spec.expectedDuration" if expected else "from spec.expectedDuration", False
