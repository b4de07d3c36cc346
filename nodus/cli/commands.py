"""Client commands: ``nodus logs`` and ``nodus sim``. Like kubectl, they only talk to the API."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

from nodus.apimachinery import units
from nodus.cli.processes import duration, kubeconfig_path

SIM_ACTIONS = ("preempt", "kill", "fail-boot")


def add_logs_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="job/NAME or attempt/NAME")
    parser.add_argument("-n", "--namespace", "--project", dest="project", default="default", help="the project")
    parser.add_argument("-f", "--follow", action="store_true", help="stream new lines until the attempt ends")
    parser.add_argument("--index", type=int, help="the Job index (default 0)")
    parser.add_argument("--attempt", type=int, help="the attempt number within the index (default the latest)")
    parser.add_argument("--tail", type=int, help="only the last N lines")
    parser.add_argument("--since", type=duration, help="only lines newer than this, e.g. 5m")
    parser.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def logs(args: argparse.Namespace) -> None:
    from nodus.client import Client, ClientConfig, errors

    kind, _, name = args.target.partition("/")
    plural = {"job": "jobs", "jobs": "jobs", "nj": "jobs", "attempt": "attempts", "attempts": "attempts"}.get(kind)
    if plural is None or not name:
        raise SystemExit("nodus logs: name job/NAME or attempt/NAME")
    params: dict[str, Any] = {}
    if args.follow:
        params["follow"] = "true"
    if args.tail is not None:
        params["tailLines"] = args.tail
    if args.since is not None:
        params["sinceSeconds"] = max(int(args.since.total_seconds()), 1)
    if args.timestamps:
        params["timestamps"] = "true"
    if plural == "jobs":
        if args.index is not None:
            params["index"] = args.index
        if args.attempt is not None:
            params["attempt"] = args.attempt
    path = f"/apis/nodus.dev/v1/namespaces/{args.project}/{plural}/{name}/log"
    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> None:
        async with Client(config, user_agent="nodus-cli", timeout=3600.0 * 24 if args.follow else 30.0) as client:
            try:
                async for line in client.stream_lines(path, params):
                    sys.stdout.write(line + "\n")
                    sys.stdout.flush()
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def add_sim_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=SIM_ACTIONS, help="the fault to inject")
    parser.add_argument("node", help="the Node (kubectl get nodes.nodus.dev)")
    parser.add_argument("--notice", type=duration, help="preempt: how long before the host goes away (default 30s)")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")


def sim(args: argparse.Namespace) -> None:
    """Ask the simulated cloud for a fault by annotating the Node, as any requested action is asked."""
    from nodus.client import Client, ClientConfig, errors

    annotations = {f"sim.nodus.dev/{args.action}-requested-at": units.format_micro_time(units.now())}
    if args.action == "preempt" and args.notice is not None:
        annotations["sim.nodus.dev/preempt-notice"] = f"{int(args.notice.total_seconds())}s"
    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> None:
        async with Client(config, user_agent="nodus-cli") as client:
            try:
                await client.patch("nodes", args.node, {"metadata": {"annotations": annotations}})
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    asyncio.run(main())
    print(f"node/{args.node} {args.action} requested")
