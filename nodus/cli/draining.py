"""``nodus pools drain NODE`` and ``nodus pools uncordon NODE``: move a host's work elsewhere, or let work back.

A drain cordons the host (nothing new lands there) and asks each program on it to checkpoint and stop;
the Job controller runs each again elsewhere from that checkpoint. The command follows the drain until no
attempt is left on the host (``--no-wait`` returns at once) and prints each attempt as it leaves. Owners
drain the hosts of their project's Pools, administrators any host (``nodus.api.draining``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta
from typing import Any

from nodus.cli.processes import duration, kubeconfig_path

POLL_SECONDS = 1.0


def add_drain_commands(commands: Any) -> None:
    """Add ``drain`` and ``uncordon`` to the ``nodus pools`` subcommands."""
    drain = commands.add_parser("drain", help="move a host's work elsewhere (with checkpoints) and cordon it")
    drain.add_argument("node", metavar="NODE", help="the host's Node name")
    drain.add_argument(
        "--grace", type=duration, default=timedelta(minutes=5), help="time to checkpoint before a stop (default 5m)"
    )
    drain.add_argument("--no-wait", action="store_true", help="return once the drain is asked for")
    drain.add_argument(
        "--timeout", type=duration, default=timedelta(minutes=30), help="how long to follow it (default 30m)"
    )
    drain.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    drain.set_defaults(run="draining:drain_node")
    uncordon = commands.add_parser("uncordon", help="let new work land on a drained or cordoned host again")
    uncordon.add_argument("node", metavar="NODE", help="the host's Node name")
    uncordon.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    uncordon.set_defaults(run="draining:uncordon_node")


def _path(node: str) -> str:
    return f"/apis/nodus.dev/v1/nodes/{node}/drain"


def drain_node(args: argparse.Namespace) -> None:
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    body = {"kind": "NodeDrain", "spec": {"gracePeriodSeconds": int(args.grace.total_seconds())}}

    async def main() -> int:
        async with Client(config, user_agent="nodus-cli") as client:
            try:
                answer = (await client.request("POST", _path(args.node), json=body)).json()
                print(f"node/{args.node} cordoned; draining")
                if args.no_wait:
                    return 0
                return await _follow(client, args.node, answer, time.monotonic() + args.timeout.total_seconds())
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None

    raise SystemExit(asyncio.run(main()))


async def _follow(client: Any, node: str, answer: dict[str, Any], until: float) -> int:
    seen: set[tuple[str, str]] = set()
    while True:
        status = answer.get("status") or {}
        left = {(a["namespace"], a["name"]) for a in status.get("attempts") or []}
        for namespace, name in sorted(seen - left):
            print(f"attempt {namespace}/{name} left node/{node}")
        seen = left
        if not left:
            print(f"node/{node} drained")
            return 0
        if time.monotonic() > until:
            print(f"node/{node} still runs {len(left)} attempt(s); the drain goes on (nodus pools drain {node})")
            return 1
        await asyncio.sleep(POLL_SECONDS)
        answer = (await client.request("GET", _path(node))).json()


def uncordon_node(args: argparse.Namespace) -> None:
    from nodus.client import Client, ClientConfig, errors

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))

    async def main() -> None:
        async with Client(config, user_agent="nodus-cli") as client:
            try:
                await client.request("DELETE", _path(args.node))
            except errors.APIError as exc:
                raise SystemExit(f"Error from server ({exc.reason}): {exc.message}") from None
        print(f"node/{args.node} uncordoned")

    asyncio.run(main())
